"""Where the profiler window falls, and what it does to the epochs after it, against plain launches, interleaved.

    python scripts/measure_window_position.py --case trainer --num-workers 2 [--rounds 6] [--epochs 5]
    python scripts/measure_window_position.py --case lora --num-workers 0 --positions early,late

Each round is one plain launch of a real case (``lora``: the built-in workload, batch 4; ``trainer``:
scripts/bench_trainer.py, batch 4), ``--epochs`` epochs long, and one ``dlprof record`` of it per window position,
their order rotated from round to round:

* **early**: dlprof record's default ``--wait``: the window falls in the first epoch, while the training warms up;
* **late**: ``--wait`` of two epochs: the window falls in the third epoch, after the warm-up of the first two.

Each recording keeps timing unprofiled steps to the end of the launches' last epoch. Per epoch after the first, the
steady steps (each epoch's first settling and queue-filling steps left out; the window's epoch left out whole) of each
recording against the same step indices of its round's plain launch, medians over the rounds: what a window at that
position does to the epochs that follow it, and how the plain launches' own speed moves from epoch to epoch (the
truth of scripts/bench_advice.py is their epochs 2 and 3). ``--allocator fixed`` as in scripts/bench_advice.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_advice import FIXED_ALLOCATOR_ENV, TRAINER
from measure_after_effect import WINDOW_STEPS, pct, rate, run_checked, step_clock_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.cli_options import DEFAULT_WAIT  # noqa: E402
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, PHASE_AFTER, PHASE_BEFORE  # noqa: E402
from dlprof.workloads.lora import DEFAULT_DATASET  # noqa: E402
from dlprof.workloads.records import load_examples  # noqa: E402

BATCH_SIZE = 4
#: Batches each worker keeps queued (the DataLoader's default prefetch_factor): an epoch's first steps fill the queue.
PREFETCH_FACTOR = 2
POSITIONS = ("early", "late")
UNPROFILED = (PHASE_BEFORE, PHASE_AFTER)


def _training(case: str, workers: int, epochs: int, steps_per_epoch: int) -> list[str]:
    """The case's training command and its options, for a plain launch of ``epochs`` epochs."""
    if case == "trainer":
        return [sys.executable, str(TRAINER), "--num-workers", str(workers), "--epochs", str(epochs)]
    return [
        sys.executable,
        *("-m", "dlprof.workloads.lora", "--batch-size", str(BATCH_SIZE), "--num-workers", str(workers)),
        *("--steps", str(epochs * steps_per_epoch)),
    ]


def _launch(command: list[str], report: Path, env: dict[str, str]) -> list[float]:
    run_checked([*command, "--report", str(report)], env)
    return [float(ms) for ms in json.loads(report.read_text())["step_ms"]]


def _record(
    case: str, workers: int, wait: int, reference_steps: int, out: Path, env: dict[str, str]
) -> tuple[list[float], list[str]]:
    """A recording whose window waits ``wait`` steps and that times ``reference_steps`` unprofiled steps after it: each
    step's wall ms and phase."""
    command = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "run", "--wait", str(wait)]
    command += ["--reference-steps", str(reference_steps)]
    if case == "trainer":  # dlprof stops the script once it has timed the reference steps
        command += ["--", "python", str(TRAINER), "--num-workers", str(workers), "--epochs", "40"]
    else:
        command += ["--num-workers", str(workers), "--batch-size", str(BATCH_SIZE)]
    run_checked(command, env)
    return step_clock_of(out / "run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("lora", "trainer"), default="trainer")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of one plain launch and one recording a position")
    parser.add_argument("--epochs", type=int, default=5, help="epochs each plain launch runs and each recording times")
    parser.add_argument("--positions", default=",".join(POSITIONS), help=f"window positions: {', '.join(POSITIONS)}")
    parser.add_argument("--allocator", choices=("fixed", "glibc"), default="fixed")
    args = parser.parse_args(argv)
    positions = [p for p in args.positions.split(",") if p]
    if not positions or any(p not in POSITIONS for p in positions):
        parser.error(f"--positions: a comma-separated list of {', '.join(POSITIONS)}")
    if args.epochs < 4:
        parser.error("--epochs: at least 4 (the late window falls in the third epoch)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if args.allocator == "fixed":
        env.update(FIXED_ALLOCATOR_ENV)
    per_epoch = math.ceil(len(load_examples(DEFAULT_DATASET)) / BATCH_SIZE)  # both cases' data set and batch
    steps = args.epochs * per_epoch
    waits = {"early": DEFAULT_WAIT, "late": 2 * per_epoch}
    skip = EPOCH_SETTLE_STEPS + PREFETCH_FACTOR * args.num_workers
    plain = _training(args.case, args.num_workers, args.epochs, per_epoch)
    print(f"{args.case}, batch {BATCH_SIZE}, num_workers={args.num_workers}, {per_epoch} steps an epoch, allocator")
    print(f"{args.allocator}; windows: " + ", ".join(f"{p} --wait {waits[p]}" for p in positions))
    print(f"per epoch: steady steps/s (each epoch's first {skip} steps left out; the window's epoch left out)\n")
    kinds = ["plain", *positions]
    # ratios[position][epoch]: recording over plain launch, one a round; plain_rates[epoch]: steps/s, one a round.
    ratios: dict[str, dict[int, list[float]]] = {p: {} for p in positions}
    plain_rates: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="window-position-") as scratch:
        for round_index in range(args.rounds):
            shift = round_index % len(kinds)
            walls: dict[str, tuple[list[float], list[str] | None]] = {}
            for kind in kinds[shift:] + kinds[:shift]:
                if kind == "plain":
                    walls[kind] = (_launch(plain, Path(scratch) / f"plain{round_index}.json", env), None)
                else:
                    out = Path(scratch) / f"{kind}{round_index}"
                    reference = steps - waits[kind] - WINDOW_STEPS  # to the launches' last step
                    walls[kind] = _record(args.case, args.num_workers, waits[kind], reference, out, env)
            plain_ms = walls["plain"][0]
            if len(plain_ms) != steps:
                raise SystemExit(f"the plain launch ran {len(plain_ms)} steps, not {steps}")
            cells = []
            for epoch in range(1, args.epochs):
                epoch_steps = range(epoch * per_epoch, (epoch + 1) * per_epoch)
                steady = epoch_steps[skip:]
                plain_rate = rate([plain_ms[i] for i in steady])
                plain_rates.setdefault(epoch, []).append(plain_rate)
                cell = [f"epoch {epoch + 1}: plain {plain_rate:.2f}"]
                for position in positions:
                    wall, phase = walls[position]
                    assert phase is not None
                    # The window's epoch is left out whole: after its window come the fork probe's settling steps.
                    if epoch_steps.stop > len(wall) or any(phase[i] not in UNPROFILED for i in epoch_steps):
                        cell.append(f"{position} -")
                        continue
                    ratio = rate([wall[i] for i in steady]) / plain_rate
                    ratios[position].setdefault(epoch, []).append(ratio)
                    cell.append(f"{position} {pct(ratio)}")
                cells.append(" ".join(cell))
            print(f"round {round_index + 1}: " + "; ".join(cells), flush=True)
    print(
        "\n| epoch | plain steps/s (median; range) | "
        + " | ".join(f"{p} window: against plain" for p in positions)
        + " |"
    )
    print("|---|---|" + "---|" * len(positions))
    for epoch in range(1, args.epochs):
        got = plain_rates[epoch]
        row = [f"{epoch + 1}", f"{statistics.median(got):.2f}; {min(got):.2f}-{max(got):.2f}"]
        for position in positions:
            found = ratios[position].get(epoch)
            row.append(
                f"{pct(statistics.median(found))} ({pct(min(found))} to {pct(max(found))}; {len(found)})"
                if found
                else "window"
            )
        print("| " + " | ".join(row) + " |")
    for position in positions:
        every = list(itertools.chain.from_iterable(ratios[position].values()))
        print(f"{position} window: every epoch after it, every round: median {pct(statistics.median(every))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
