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

Every run goes through this script's ``--inner`` mode, which wraps ``DataLoader.__iter__`` (after dlprof's own
wrapping, in a recording) and reads ``getrusage`` of the process (all its threads) and of its reaped children (the
workers of the epochs before) at each epoch's start. For every epoch after the window's (the first), each recorded
run's per-epoch figures are divided by its round's plain launch's: medians and ranges over the rounds. The fixed
allocator of scripts/bench_advice.py throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BATCH_SIZE = 4
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
#: Python's garbage collections in the training process: their time (s) and how many were full (generation 2).
_GC = {"s": 0.0, "full": 0, "started": 0.0}


def _gc_callback(phase: str, info: dict) -> None:
    if phase == "start":
        _GC["started"] = time.perf_counter()
        return
    _GC["s"] += time.perf_counter() - _GC["started"]
    _GC["full"] += info.get("generation") == 2


def _reading() -> dict[str, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": time.monotonic(),
        "main_user_s": own.ru_utime,
        "main_sys_s": own.ru_stime,
        "main_minflt": own.ru_minflt,
        "main_nvcsw": own.ru_nvcsw,
        "main_nivcsw": own.ru_nivcsw,
        "workers_cpu_s": children.ru_utime + children.ru_stime,
        "gc_s": _GC["s"],
        "gc_full": _GC["full"],
        "main_rss_mib": int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20,
    }


def inner(out: str, module_argv: list[str]) -> None:
    """Run ``python -m MODULE ARGS`` in this process, a reading at each ``DataLoader.__iter__``, kept by loader: the
    training's loader is the one iterated most (dlprof's calibration, after the training, makes loaders of its own)."""
    import atexit
    import gc

    from torch.utils.data import DataLoader

    gc.callbacks.append(_gc_callback)

    readings: dict[int, list[dict[str, float]]] = {}
    original = DataLoader.__iter__

    def __iter__(self):
        readings.setdefault(id(self), []).append(_reading())
        return original(self)

    DataLoader.__iter__ = __iter__  # type: ignore[method-assign]

    def dump() -> None:
        Path(out).write_text(json.dumps(max(readings.values(), key=len, default=[])))

    atexit.register(dump)
    sys.argv = module_argv[1:]
    runpy.run_module(module_argv[1], run_name="__main__", alter_sys=True)


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
    wrapped = [sys.executable, str(Path(__file__).resolve()), "--inner", str(figures), *workload]
    options = VARIANTS[variant]
    if options is None:
        command = wrapped
    else:
        command = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "run", "--run-to-end"]
        command += [*options, "--", *wrapped]
    if variant == "baseline":
        env = {**env, "PYTHONPATH": str(baseline)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed ({done.returncode}): {done.stderr[-2000:]}")
    return _epochs(figures)


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f} %"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--inner"]:
        inner(argv[1], ["-m", *argv[3:]] if argv[2] == "-m" else argv[2:])
        return 0
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
    from bench_advice import FIXED_ALLOCATOR_ENV  # not in --inner: the training process imports nothing of it

    from dlprof.workloads.lora import DEFAULT_DATASET
    from dlprof.workloads.records import load_examples

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
                cells.append(f"{variant} wall {_pct(wall)}")
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
            row.append(f"{_pct(statistics.median(found))} ({_pct(min(found))} to {_pct(max(found))})" if found else "-")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
