"""Where a recording's time goes, epoch by epoch, against a plain launch: the training process's CPU (user and
kernel), its page faults and context switches, and its DataLoader workers' CPU, read with ``getrusage`` where each
epoch starts.

    python scripts/measure_process_cpu.py [--rounds 8] [--epochs 6] [--num-workers 2]
    python scripts/measure_process_cpu.py --variants plain,record,record-no-spans

Each round runs the built-in workload (tiny Qwen2 + LoRA, batch 4) once per variant, in an order rotated from round
to round, every one ``--epochs`` epochs long:

* **plain**: ``python -m dlprof.workloads.lora``, no dlprof;
* **record**: ``dlprof record --run-to-end`` of the same command (the window in the first epoch, dlprof's default);
* **record-no-spans**: the same with ``--no-loader-spans`` (no probe in the workers);
* **baseline**: ``dlprof record --run-to-end`` from another checkout (``--baseline PATH``): a change's before and after
  in the same run.

The last epoch is cut short by the step count and not compared (its end would hold dlprof's work after training).

Every training runs under scripts/epoch_rusage.py, which wraps ``DataLoader.__iter__`` and reads ``getrusage`` of
the process (all its threads) and of its reaped children (the workers of the epochs before) at each epoch's start.
For every epoch after the window's (the first), each recorded run's per-epoch figures are divided by its round's plain
launch's: medians and ranges over the rounds. The fixed allocator of scripts/bench_advice.py throughout.
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
    variant: str, steps: int, workers: int, out: Path, env: dict[str, str], baseline: str | None
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
        command += [*options, "--", *wrapped]
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
    # ratios[variant][figure]: one per round and epoch after the first
    ratios: dict[str, dict[str, list[float]]] = {v: {f: [] for f in FIGURES + LEVELS} for v in recorded}
    plain_per_step: dict[str, list[float]] = {f: [] for f in FIGURES + LEVELS}
    print(f"built-in workload, batch {BATCH_SIZE}, num_workers={args.num_workers}, {per_epoch} steps an epoch")
    with tempfile.TemporaryDirectory(prefix="process-cpu-") as scratch:
        for round_index in range(args.rounds):
            shift = round_index % len(variants)
            got = {
                v: _run(v, steps, args.num_workers, Path(scratch) / f"{v}{round_index}", env, args.baseline)
                for v in variants[shift:] + variants[:shift]
            }
            plain = got["plain"][1:]
            for epoch in plain:
                for figure in FIGURES:
                    plain_per_step[figure].append(epoch[figure] / per_epoch)
                for level in LEVELS:
                    plain_per_step[level].append(epoch[level])
            cells = []
            for variant in recorded:
                epochs = got[variant][1:]
                if len(epochs) != len(plain):
                    raise SystemExit(f"{variant}: {len(epochs)} epochs against the plain launch's {len(plain)}")
                for mine, theirs in zip(epochs, plain):
                    for figure in FIGURES + LEVELS:
                        if theirs[figure] > 0:
                            ratios[variant][figure].append(mine[figure] / theirs[figure])
                wall = statistics.median(m["wall_s"] / p["wall_s"] for m, p in zip(epochs, plain))
                cells.append(f"{variant} wall {pct(wall)}")
            print(f"round {round_index + 1}: " + "; ".join(cells), flush=True)
    print(
        f"\nplain launches, median over every epoch after the first: per step ({', '.join(LEVELS)}: at the epoch's"
        " start)"
    )
    print("  " + ", ".join(f"{f} {statistics.median(v):.5g}" for f, v in plain_per_step.items()))
    print("\n| figure, epoch against plain | " + " | ".join(recorded) + " |")
    print("|---|" + "---|" * len(recorded))
    for figure in FIGURES + LEVELS:
        row = [figure]
        for variant in recorded:
            found = ratios[variant][figure]
            row.append(f"{pct(statistics.median(found))} ({pct(min(found))} to {pct(max(found))})" if found else "-")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
