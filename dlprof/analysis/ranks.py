"""A job of several ranks: each rank's costs, the rank that sets the pace, and what waiting for it cost the others.

With data-parallel training every rank meets the others in a collective (DDP's gradient all-reduce)
each step. A rank that is late (starved of data, say) makes every other rank wait there: their time
shows up inside the collective, not in the DataLoader. So each rank's step is split into the time in
collectives and the rest, its *own* work; the rank with the most own work per step is the one the
others wait for, and what each other rank spends in collectives beyond that rank's own collective
time is waiting for it.
"""

from __future__ import annotations

import statistics

from dlprof.analysis.intervals import Timeline
from dlprof.errors import display
from dlprof.results.analysis import LoaderStats, RankComparison, RankStats, StepBreakdown
from dlprof.trace.run import TraceRun

#: The slowest rank is called data-starved when its extra data wait (over the other ranks' median)
#: explains at least this share of its extra own work per step; else the extra is its compute.
DATA_REASON_SHARE = 0.5


def collective_ms_per_step(run: TraceRun) -> tuple[float, list[str]]:
    """Mean time per profiled step the training thread spent in collectives, and their kinds (most time first)."""
    if not run.steps:
        return 0.0, []
    busy = Timeline((c.start_us, c.end_us) for c in run.collectives)
    total_us = sum(sum(e - s for s, e in busy.clip(step.start_us, step.end_us)) for step in run.steps)
    by_kind: dict[str, float] = {}
    for c in run.collectives:
        by_kind[c.name] = by_kind.get(c.name, 0.0) + c.dur_us
    return total_us / 1000 / len(run.steps), sorted(by_kind, key=by_kind.get, reverse=True)


def rank_stats(
    run: TraceRun, steps: StepBreakdown, loader: LoaderStats | None, unprofiled_step_ms: float | None
) -> RankStats:
    """One rank's row."""
    collective_ms, kinds = collective_ms_per_step(run)
    workers = [
        w.pss_mib_last for w in (loader.workers if loader else []) if w.worker >= 0 and w.pss_mib_last is not None
    ]
    config = run.manifest.loader if run.manifest else None
    return RankStats(
        rank=run.rank if run.rank is not None else 0,
        trace_file=display(run.path.name),
        steps=len(steps.steps),
        step_ms=steps.step.mean_ms,
        data_wait_ms=steps.categories["data_wait"].mean_ms,
        data_wait_pct=steps.data_wait_pct,
        collective_ms=collective_ms,
        own_ms=max(0.0, steps.step.mean_ms - collective_ms),
        loader_batch_ms=loader.batch.mean_ms if loader else None,
        worker_pss_mib=sum(workers) if workers else None,
        num_workers=config.num_workers if config else None,
        unprofiled_step_ms=unprofiled_step_ms,
        collective_kinds=tuple(kinds),
    )


def compare_ranks(rows: list[RankStats]) -> RankComparison:
    """The slowest rank, why, and how long each other rank waited for it per step."""
    rows = sorted(rows, key=lambda r: r.rank)
    collectives = list(dict.fromkeys(kind for r in rows for kind in r.collective_kinds))  # rank by rank, each once
    slowest = max(rows, key=lambda r: r.own_ms)
    others = [r for r in rows if r.rank != slowest.rank]
    if others:
        extra_wait = max(0.0, slowest.data_wait_ms - statistics.median(r.data_wait_ms for r in others))
        extra_own = max(0.0, slowest.own_ms - statistics.median(r.own_ms for r in others))
    else:
        extra_wait = extra_own = 0.0
    reason = "data" if extra_own > 0 and extra_wait >= DATA_REASON_SHARE * extra_own else "compute"
    waited = {r.rank: max(0.0, r.collective_ms - slowest.collective_ms) for r in others}
    return RankComparison(rows, slowest.rank, reason, extra_wait, waited, collectives)


#: A world size beyond this is taken for a malformed manifest, not a job: no rank is then called missing.
MAX_WORLD_SIZE = 1 << 20


def missing_ranks(runs: list[TraceRun]) -> tuple[int, ...]:
    """The ranks of the job's world (the largest ``world_size`` the manifests hold) that left no trace among ``runs``:
    a node whose run directory was not given, a rank that crashed before its window. Empty when the world size is
    unknown."""
    sizes = [run.manifest.world_size for run in runs if run.manifest is not None and run.manifest.world_size]
    world = max(sizes, default=0)
    if world > MAX_WORLD_SIZE:
        return ()
    present = {run.rank if run.rank is not None else 0 for run in runs}
    return tuple(rank for rank in range(world) if rank not in present)
