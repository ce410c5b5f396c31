"""Which part of a recording slows the training after it? Each part alone, in a plain training, interleaved.

    python scripts/measure_window_effect.py [--processes 4] [--parts none,window,kept,fork,both]

Each process trains the built-in workload (batch 4, ``num_workers=0``: the training alone) in this script's own loop,
no dlprof, for two epochs; then does one part of what ``dlprof record`` does at that point; then trains two epochs
more. Its speed after against before, over each epoch's steady steps, against the processes that did nothing in
between (``none``), tells what that part leaves behind. The parts:

* ``window``: a ``torch.profiler`` window as dlprof's (CPU activity, ``schedule(wait=0, warmup=3, active=20)``,
  the trace exported to a file, its events released as dlprof releases them);
* ``kept``: the same window, the profiler then kept started and stepped at every step to the end, as dlprof keeps
  it (stopped only when training ends);
* ``fork``: dlprof's fork probe (fork once, the child sleeping 2 s then leaving);
* ``both``: the window, then the fork probe two steps later, as a recording at ``num_workers=0`` has them.

The parts run in turn within each round, their order rotated from round to round. ``--allocator fixed`` as in
scripts/bench_advice.py (the default).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_advice import FIXED_ALLOCATOR_ENV

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.core.manifest import EPOCH_SETTLE_STEPS  # noqa: E402

PARTS = ("none", "window", "kept", "fork", "both")
WINDOW = {"wait": 0, "warmup": 3, "active": 20}
FORK_AFTER_STEPS = 2
FORK_CHILD_S = 2.0


def _child(part: str, report: Path) -> None:
    """One process: two epochs, the part (in an epoch of its own, not timed), two epochs; every timed step's ms
    written to ``report``."""
    import torch
    from torch.utils.data import DataLoader

    from dlprof.workloads.lora import DEFAULT_DATASET, LEARNING_RATE, WorkloadOptions, build_model, load_tokenizer
    from dlprof.workloads.records import load_examples
    from dlprof.workloads.sft import PadCollator, SupervisedDataset

    torch.manual_seed(0)
    options = WorkloadOptions(batch_size=4, num_workers=0, device="cpu")
    tokenizer = load_tokenizer(options)
    model = build_model(options, tokenizer, "cpu")
    dataset = SupervisedDataset(load_examples(DEFAULT_DATASET), tokenizer, options.max_length, 0.0)
    loader = DataLoader(
        dataset,
        batch_size=4,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=PadCollator(tokenizer.pad_token_id, None),
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    model.train()

    def epoch(profiler=None, fork_at: int | None = None) -> list[float]:
        times, last = [], time.perf_counter()
        for i, batch in enumerate(loader):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if profiler is not None:
                profiler.step()
            if fork_at is not None and i == fork_at and os.fork() == 0:
                time.sleep(FORK_CHILD_S)
                os._exit(0)
            now = time.perf_counter()
            times.append(1000 * (now - last))
            last = now
        return times

    before = [epoch(), epoch()]
    profiler, fork_at = None, None
    if part in ("window", "kept", "both"):
        trace = report.with_suffix(".trace.json")

        def export(prof) -> None:
            prof.export_chrome_trace(str(trace))
            # As dlprof's recorder releases a saved window's events (capture/recorder.py, Recorder._export).
            inner = getattr(prof, "profiler", None)
            if inner is not None:
                inner.kineto_results = inner._function_events = inner._old_function_events = None
            gc.collect()

        profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(**WINDOW, repeat=1),
            on_trace_ready=export,
        )
        profiler.start()
    if part in ("fork", "both"):
        fork_at = (WINDOW["warmup"] + WINDOW["active"] if part == "both" else 0) + FORK_AFTER_STEPS
    epoch(profiler, fork_at)
    if profiler is not None and part != "kept":
        profiler.stop()
        profiler = None
    after = [epoch(profiler), epoch(profiler)]
    if profiler is not None:
        profiler.stop()
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        pass
    report.write_text(json.dumps({"before": before, "after": after}))


def _rate(epochs: list[list[float]]) -> float:
    steady = [ms for steps in epochs for ms in steps[EPOCH_SETTLE_STEPS:]]
    return 1000 * len(steady) / sum(steady)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4, help="processes per part")
    parser.add_argument("--parts", default="none,window,kept,fork,both", help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--allocator", choices=("fixed", "glibc"), default="fixed")
    parser.add_argument("--child", nargs=2, metavar=("PART", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], Path(args.child[1]))
        return 0
    parts = [p for p in args.parts.split(",") if p]
    if unknown := [p for p in parts if p not in PARTS]:
        parser.error(f"unknown part(s): {', '.join(unknown)}")
    env = {**os.environ, **(FIXED_ALLOCATOR_ENV if args.allocator == "fixed" else {})}
    ratios: dict[str, list[float]] = {p: [] for p in parts}
    print(f"built-in workload, batch 4, num_workers=0, allocator {args.allocator}; steps/s over steady steps\n")
    print("| round | part | before (epochs 1-2) | after (epochs 4-5) | after / before |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="window-effect-") as scratch:
        for round_index in range(args.processes):
            shift = round_index % len(parts)
            for part in parts[shift:] + parts[:shift]:
                report = Path(scratch) / f"{part}-{round_index}.json"
                command = [sys.executable, __file__, "--child", part, str(report)]
                done = subprocess.run(command, env=env, stderr=subprocess.PIPE, text=True)
                if done.returncode:
                    raise SystemExit(f"{part}: exited {done.returncode}:\n{done.stderr[-2000:]}")
                result = json.loads(report.read_text())
                before, after = _rate(result["before"]), _rate(result["after"])
                ratios[part].append(after / before)
                print(f"| {round_index + 1} | {part} | {before:.2f} | {after:.2f} | {after / before:.3f} |", flush=True)
    print()
    base = statistics.median(ratios["none"]) if ratios.get("none") else None
    for part, values in ratios.items():
        median = statistics.median(values)
        against = f"; against none {100 * (median / base - 1):+.1f} %" if base and part != "none" else ""
        print(f"{part}: after / before median {median:.3f} (range {min(values):.3f}-{max(values):.3f}){against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
