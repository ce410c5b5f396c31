"""Where a recording's time goes, epoch by epoch, against a plain launch: the training process's CPU (user and
kernel), its page faults and context switches, and its DataLoader workers' CPU, read with ``getrusage`` where each
epoch starts.

    python scripts/measure_process_cpu.py [--rounds 8] [--epochs 6] [--num-workers 2]
    python scripts/measure_process_cpu.py --variants plain,record,record-no-spans
    python scripts/measure_process_cpu.py --window-epoch 2 --epochs 7   # epoch 1 before the window, 3-5 after

Each round runs the built-in workload (tiny Qwen2 + LoRA, batch 4) once per variant, in an order rotated from round
to round, every one ``--epochs`` epochs long:

* **plain**: ``python -m dlprof.workloads.lora``, no dlprof;
* **record**: ``dlprof record --run-to-end`` of the same command (the window in the first epoch, dlprof's default,
  or in epoch ``--window-epoch`` counted from 0: ``--wait`` that many epochs' steps);
* **record-no-spans**: the same with ``--no-loader-spans`` (no probe in the workers);
* **record-short-window**: the same with ``--active 5`` (a quarter of the window: does what it leaves follow its size?);
* **baseline**: ``dlprof record --run-to-end`` from another checkout (``--baseline PATH``): a change's before and after
  in the same run.

The last epoch is cut short by the step count and not compared (its end would hold dlprof's work after training).

Every training runs under scripts/epoch_rusage.py, which wraps ``DataLoader.__iter__`` and reads ``getrusage`` of
the process (all its threads) and of its reaped children (the workers of the epochs before) at each epoch's start.
For every epoch but the first (start-up) and the window's, each recorded run's per-epoch figures are divided by its
round's plain launch's: medians and ranges over the rounds, apart for the epochs before the window (the workers' probe
and the step clock only) and after it. The fixed allocator of scripts/bench_advice.py throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_advice import FIXED_ALLOCATOR_ENV
from measure_after_effect import BATCH_SIZE, REPO, pct, run_checked

from dlprof.workloads.lora import DEFAULT_DATASET
from dlprof.workloads.records import load_examples

#: Reads each epoch's figures inside the training process.
EPOCH_RUSAGE = Path(__file__).resolve().parent / "epoch_rusage.py"
VARIANTS = {
    "plain": None,
    "record": [],
    "record-no-spans": ["--no-loader-spans"],
    "record-short-window": ["--active", "5"],
    "baseline": [],
}
#: Figures per epoch: what each means, from two getrusage readings (the process's own; its reaped workers').
FIGURES = (
    "wall_s",
    "main_user_s",
    "main_sys_s",
    "main_minflt",
    "main_nvcsw",
    "main_nivcsw",
    "workers_cpu_s",
    "gc_s",
    "gc_full",
)
#: Figures read as they are at the epoch's start, not as changes: the training process's resident memory.
LEVELS = ("main_rss_mib",)


def _epochs(path: Path) -> list[dict[str, float]]:
    """Per epoch that ran whole (from one ``__iter__`` to the next): each figure's change."""
    readings = json.loads(path.read_text())
    return [{**{k: b[k] - a[k] for k in FIGURES}, **{k: a[k] for k in LEVELS}} for a, b in zip(readings, readings[1:])]


def _run(
    variant: str, steps: int, workers: int, out: Path, env: dict[str, str], baseline: str | None, wait: list[str]
) -> list[dict[str, float]]:
    figures = out.with_suffix(".json")
    workload = ["-m", "dlprof.workloads.lora", "--batch-size", str(BATCH_SIZE), "--num-workers", str(workers)]
    workload += ["--steps", str(steps)]
    wrapped = [sys.executable, str(EPOCH_RUSAGE), str(figures), *workload]
    options = VARIANTS[variant]
    if options is None:
        command = wrapped
    else:
        command = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "run", "--run-to-end"]
        command += [*wait, *options, "--", *wrapped]
    if variant == "baseline":
        env = {**env, "PYTHONPATH": str(baseline)}
    run_checked(command, env)
    return _epochs(figures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--variants", default="plain,record,record-no-spans")
    parser.add_argument("--baseline", help="the checkout the baseline variant records with")
    parser.add_argument("--window-epoch", type=int, default=0, help="the epoch (from 0) the window starts in")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if "plain" not in variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: plain and any of {', '.join(VARIANTS)}")
    if ("baseline" in variants) != (args.baseline is not None):
        parser.error("--baseline PATH goes with the variant baseline, and only with it")
    per_epoch = -(-len(load_examples(DEFAULT_DATASET)) // BATCH_SIZE)
    steps = args.epochs * per_epoch
    env = {**os.environ, "PYTHONPATH": str(REPO), **FIXED_ALLOCATOR_ENV}
    recorded = [v for v in variants if v != "plain"]
    wait = ["--wait", str(args.window_epoch * per_epoch)] if args.window_epoch else []
    if args.window_epoch + 2 > args.epochs:
        parser.error("--epochs: at least two more than --window-epoch (an epoch after the window's, and the last)")
    phases = ["before", "after"] if args.window_epoch > 1 else ["after"]
    column_of = {(v, phase): f"{v} {phase}" if len(phases) > 1 else v for v in recorded for phase in phases}
    columns = list(column_of.values())
    # ratios[column][figure]: one per round and compared epoch
    ratios: dict[str, dict[str, list[float]]] = {c: {f: [] for f in FIGURES + LEVELS} for c in columns}
    plain_per_step: dict[str, list[float]] = {f: [] for f in FIGURES + LEVELS}
    print(f"built-in workload, batch {BATCH_SIZE}, num_workers={args.num_workers}, {per_epoch} steps an epoch")
    print(f"the window in epoch {args.window_epoch}; compared: every whole epoch but the first and the window's")
    with tempfile.TemporaryDirectory(prefix="process-cpu-") as scratch:
        for round_index in range(args.rounds):
            shift = round_index % len(variants)
            got = {
                v: _run(v, steps, args.num_workers, Path(scratch) / f"{v}{round_index}", env, args.baseline, wait)
                for v in variants[shift:] + variants[:shift]
            }
            for epoch in got["plain"][1:]:
                for figure in FIGURES:
                    plain_per_step[figure].append(epoch[figure] / per_epoch)
                for level in LEVELS:
                    plain_per_step[level].append(epoch[level])
            cells = []
            for variant in recorded:
                if len(got[variant]) != len(got["plain"]):
                    raise SystemExit(
                        f"{variant}: {len(got[variant])} epochs against the plain launch's {len(got['plain'])}"
                    )
                walls: dict[str, list[float]] = {phase: [] for phase in phases}
                for index, (mine, theirs) in enumerate(zip(got[variant], got["plain"])):
                    if index in (0, args.window_epoch):
                        continue
                    phase = "before" if index < args.window_epoch else "after"
                    for figure in FIGURES + LEVELS:
                        if theirs[figure] > 0:
                            ratios[column_of[variant, phase]][figure].append(mine[figure] / theirs[figure])
                    walls[phase].append(mine["wall_s"] / theirs["wall_s"])
                cells += [f"{variant} {phase} wall {pct(statistics.median(w))}" for phase, w in walls.items()]
            print(f"round {round_index + 1}: " + "; ".join(cells), flush=True)
    print(
        f"\nplain launches, median over every epoch after the first: per step ({', '.join(LEVELS)}: at the epoch's"
        " start)"
    )
    print("  " + ", ".join(f"{f} {statistics.median(v):.5g}" for f, v in plain_per_step.items()))
    print("\n| figure, epoch against plain | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for figure in FIGURES + LEVELS:
        row = [figure]
        for column in columns:
            found = ratios[column][figure]
            row.append(f"{pct(statistics.median(found))} ({pct(min(found))} to {pct(max(found))})" if found else "-")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
