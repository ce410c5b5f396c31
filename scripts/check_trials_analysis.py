"""Check dlprof.analysis.trials against truth measured without dlprof, on an I/O-bound loader.

The loader reads each sample for ``READ_S`` (blocking), batches of ``BATCH``, 60-step epochs; a training step takes
``STEP_S``. Truth: one launch per count, ``num_workers`` fixed, whole epochs timed after the first (and the steady rate
inside them). Trials: one process that trains on while switching between the counts in rounds (0 1 2 4, 4 2 1 0), as
``dlprof record --try-workers`` does, writing the step clock (every step's wall and wait time, epoch starts) and the
segments; dlprof.analysis.trials then measures them. Prints both side by side, the median over ``--repeats``.

    python scripts/check_trials_analysis.py --repeats 3

This loop does not keep the batches in flight at a switch (dlprof's switch does): its switches shut busy workers down.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings

SAMPLES = 240
BATCH = 4
EPOCH_STEPS = SAMPLES // BATCH
READ_S = 0.015
STEP_S = 0.020
COUNTS = (0, 1, 2, 4)
SEGMENT_STEPS = 50


def _dataset():
    import torch
    from torch.utils.data import Dataset

    class Slow(Dataset):
        def __len__(self):
            return SAMPLES

        def __getitem__(self, i):
            time.sleep(READ_S)
            return torch.zeros(8)

    return Slow()


def truth(num_workers: int, persistent: bool, epochs: int = 4) -> dict:
    """One launch: steps/s over whole epochs (after the first) and inside them (from the 16th step on)."""
    from torch.utils.data import DataLoader

    loader = DataLoader(_dataset(), batch_size=BATCH, num_workers=num_workers, persistent_workers=persistent)
    epoch_s, steady = [], []
    for epoch in range(epochs):
        start, marks = time.perf_counter(), []
        for _batch in loader:
            time.sleep(STEP_S)
            marks.append(time.perf_counter())
        if epoch:
            epoch_s.append(marks[-1] - start)
            steady.append((len(marks) - 16) / (marks[-1] - marks[15]))
    return {"epoch": EPOCH_STEPS * len(epoch_s) / sum(epoch_s), "steady": statistics.median(steady)}


def trials(rounds: int = 2) -> dict:
    """One process switching between COUNTS: its step clock and segments."""
    import torch
    from torch.utils.data import DataLoader

    dataset = _dataset()
    clock = {"wall": [], "wait": [], "epoch_start": []}
    segments, position, iterator, last = [], 0, None, time.perf_counter()

    def fresh(num_workers: int):
        rest = torch.utils.data.Subset(dataset, range(position * BATCH, SAMPLES))
        return iter(DataLoader(rest, batch_size=BATCH, num_workers=num_workers))

    for round_ in range(rounds):
        for n in COUNTS if round_ % 2 == 0 else COUNTS[::-1]:
            t0 = time.perf_counter()
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
            shutdown_ms = (time.perf_counter() - t0) * 1000
            at_start = position >= EPOCH_STEPS
            position = 0 if at_start else position
            created = time.perf_counter()
            iterator = fresh(n)
            start_ms, first_batch_ms, first = (time.perf_counter() - created) * 1000, None, len(clock["wall"])
            for k in range(SEGMENT_STEPS):
                w0, starts = time.perf_counter(), k == 0 and at_start
                try:
                    next(iterator)
                except StopIteration:  # the epoch ended: workers restart
                    if hasattr(iterator, "_shutdown_workers"):
                        iterator._shutdown_workers()
                    position, starts = 0, True
                    iterator = fresh(n)
                    next(iterator)
                w1 = time.perf_counter()
                first_batch_ms = first_batch_ms or (w1 - created) * 1000
                position += 1
                time.sleep(STEP_S)
                now = time.perf_counter()
                clock["wall"].append((now - last) * 1000)
                clock["wait"].append((w1 - w0) * 1000)
                clock["epoch_start"].append(starts)
                last = now
            segments.append(
                {
                    "num_workers": n,
                    "persistent_workers": False,
                    "round": round_,
                    "first_step": first,
                    "steps": SEGMENT_STEPS,
                    "shutdown_ms": shutdown_ms,
                    "start_ms": start_ms,
                    "first_batch_ms": first_batch_ms,
                    "at_epoch_start": at_start,
                }
            )
    return {"clock": clock, "segments": segments, "rounds": rounds}


def measure(doc: dict) -> dict[int, dict]:
    """dlprof.analysis.trials on one trials process's step clock: per count, steps/s inside an epoch and over epochs."""
    from dlprof.analysis.trials import trials_result
    from dlprof.core.manifest import LoaderConfig, Manifest, StepClock, Trials, TrialSegment

    clock, count = doc["clock"], len(doc["clock"]["wall"])
    steps = StepClock(
        phase=("trial",) * count,
        wall_ms=tuple(clock["wall"]),
        cpu_ms=(0.0,) * count,
        runq_ms=(0.0,) * count,
        wait_ms=tuple(clock["wait"]),
        batches=(1,) * count,
        epoch_start=tuple(clock["epoch_start"]),
        fork_probe=(False,) * count,
    )
    segments = tuple(TrialSegment(**s) for s in doc["segments"])
    loader = LoaderConfig(id=0, num_workers=0, prefetch_factor=2, persistent_workers=False, length=EPOCH_STEPS)
    manifest = Manifest(
        manifest_version=3,
        loader=loader,
        step_clock=steps,
        trials=Trials(
            counts=COUNTS, rounds=doc["rounds"], trial_steps=40, persistent=False, loader=0, segments=segments
        ),
    )
    result = trials_result(manifest, 1.0)
    return {r.num_workers: {"steady": r.steps_per_s, "epoch": r.epoch_steps_per_s} for r in result.settings}


def _child(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.child:
        kind, *rest = args.child
        print(json.dumps(truth(int(rest[0]), rest[1] == "1") if kind == "truth" else trials()))
        return
    launches = {n: [] for n in COUNTS}
    measured = {n: [] for n in COUNTS}
    for _ in range(args.repeats):  # interleaved, so that drift hits both
        for n in COUNTS:
            launches[n].append(_child("--child", "truth", str(n), "0"))
        for n, found in measure(_child("--child", "trials")).items():
            measured[n].append(found)
    print("num_workers  truth steady  trials steady (error)       truth epochs  trials epochs (error)")
    for n in COUNTS:
        cells = []
        for key in ("steady", "epoch"):
            true = statistics.median(r[key] for r in launches[n])
            found = ", ".join(f"{r[key]:.2f} ({100 * (r[key] / true - 1):+.1f} %)" for r in measured[n])
            cells += [f"{true:12.2f}", found]
        print(f"{n:>11}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
