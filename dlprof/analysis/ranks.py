"""A job of several ranks: each rank's costs, the rank that sets the pace, and what waiting for it cost the others.

With data-parallel training every rank meets the others in a collective (DDP's gradient all-reduce)
each step. A rank that is late (starved of data, say) makes every other rank wait there: their time
shows up inside the collective, not in the DataLoader. So each rank's step is split into the time in
collectives and the rest, its *own* work; the rank with the most own work per step is the one the
others wait for, and what each other rank spends in collectives beyond that rank's own collective
time is waiting for it.

For a job of many ranks, :func:`summarize_ranks` sums the ranks up (``JobSummary``): how step time, data
wait and collectives spread over them, the few slowest ranks with why and who waited for each, the ranks
by machine, and the data of the HTML report's histogram and heat map.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence

from dlprof.analysis.intervals import Timeline
from dlprof.analysis.stats import percentile
from dlprof.core.errors import display
from dlprof.results.analysis import (
    DATA_REASON_SHARE,
    HistogramBin,
    JobSummary,
    LoaderStats,
    NodeGroup,
    RankComparison,
    RankSpread,
    RankStats,
    SlowRank,
    StepBreakdown,
    StepHeatMap,
)
from dlprof.trace.run import TraceRun

#: The slowest ranks a summary names (each with why, and who waited for it): few enough to read at any scale.
SLOWEST_RANKS = 5
#: At most this many bins in the histogram of data wait per rank (fewer with fewer ranks: one per rank).
DATA_WAIT_BINS = 20
#: torch.profiler's tensorboard_trace_handler names a trace ``<host>_<pid>.<ms>.pt.trace.json[.gz]``, and so does
#: dlprof: the host of a trace without a manifest.
_TRACE_NAME = re.compile(r"^(?P<host>.+)_\d+\.\d+\.pt\.trace\.json(\.gz)?$")


def collective_ms_per_step(run: TraceRun) -> tuple[float, list[str]]:
    """Mean time per profiled step the training thread spent in collectives, and their kinds (most time first)."""
    if not run.steps:
        return 0.0, []
    busy = Timeline((c.start_us, c.end_us) for c in run.collectives)
    total_us = sum(sum(e - s for s, e in busy.clip(step.start_us, step.end_us)) for step in run.steps)
    by_kind: dict[str, float] = {}
    for c in run.collectives:
        by_kind[c.name] = by_kind.get(c.name, 0.0) + c.dur_us
    return total_us / 1000 / len(run.steps), sorted(by_kind, key=by_kind.__getitem__, reverse=True)


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
        host=_host(run),
        per_step_ms=tuple((s.number, s.step_ms) for s in steps.steps),
    )


def _host(run: TraceRun) -> str | None:
    """The machine a rank ran on: its manifest's hostname, else the host in the trace's name."""
    host = run.manifest.host if run.manifest else None
    if host is not None and host.hostname:
        return host.hostname
    match = _TRACE_NAME.match(run.path.name)
    return match.group("host") if match else None


def _excess(row: RankStats, rows: Sequence[RankStats]) -> tuple[float, float, str]:
    """``row``'s data wait and own work per step beyond the other ranks' medians, and why it is slow: "data" when the
    extra data wait is at least :data:`DATA_REASON_SHARE` of the extra own work, else "compute"."""
    others = [r for r in rows if r.rank != row.rank]
    if others:
        extra_wait = max(0.0, row.data_wait_ms - statistics.median(r.data_wait_ms for r in others))
        extra_own = max(0.0, row.own_ms - statistics.median(r.own_ms for r in others))
    else:
        extra_wait = extra_own = 0.0
    reason = "data" if extra_own > 0 and extra_wait >= DATA_REASON_SHARE * extra_own else "compute"
    return extra_wait, extra_own, reason


def slowness(row: RankStats) -> tuple[float, int]:
    """Most own work first; the lower rank first on a tie."""
    return (-row.own_ms, row.rank)


def compare_ranks(rows: list[RankStats]) -> RankComparison:
    """The slowest rank, why, how long each other rank waited for it per step, and the ranks summed up."""
    rows = sorted(rows, key=lambda r: r.rank)
    collectives = list(dict.fromkeys(kind for r in rows for kind in r.collective_kinds))  # rank by rank, each once
    slowest = min(rows, key=slowness)
    extra_wait, _, reason = _excess(slowest, rows)
    waited = {r.rank: max(0.0, r.collective_ms - slowest.collective_ms) for r in rows if r.rank != slowest.rank}
    return RankComparison(
        ranks=rows,
        slowest_rank=slowest.rank,
        slowest_reason=reason,
        extra_data_wait_ms=extra_wait,
        waited_ms=waited,
        collectives=collectives,
        summary=summarize_ranks(rows),
    )


def _spread(rows: Sequence[RankStats], value) -> RankSpread:
    values = [value(r) for r in rows]
    top = max(values)
    return RankSpread(
        percentile(values, 50), percentile(values, 90), top, next(r.rank for r in rows if value(r) == top)
    )


def _slow_rank(row: RankStats, rows: Sequence[RankStats]) -> SlowRank:
    extra_wait, extra_own, reason = _excess(row, rows)
    # A rank with less own work reaches the collective first and waits there for this one: its time in collectives
    # beyond this rank's own is that wait (for the slowest rank, RankComparison.waited_ms).
    waits = {
        r.rank: r.collective_ms - row.collective_ms
        for r in rows
        if r.own_ms < row.own_ms and r.collective_ms > row.collective_ms
    }
    values = list(waits.values())
    return SlowRank(
        stats=row,
        reason=reason,
        extra_data_wait_ms=extra_wait,
        extra_own_ms=extra_own,
        waited_by=tuple(sorted(waits)),
        waited_ms_mean=sum(values) / len(values) if values else None,
        waited_ms_max=max(values) if values else None,
    )


def _nodes(rows: Sequence[RankStats]) -> list[NodeGroup]:
    by_host: dict[str | None, list[RankStats]] = {}
    for r in rows:
        by_host.setdefault(r.host, []).append(r)
    groups = []
    for host, members in by_host.items():
        slowest = min(members, key=slowness)
        groups.append(
            NodeGroup(
                host=host,
                ranks=tuple(r.rank for r in members),
                step_ms_p50=statistics.median(r.step_ms for r in members),
                slowest_rank=slowest.rank,
                slowest_own_ms=slowest.own_ms,
            )
        )
    return sorted(groups, key=lambda g: (-g.slowest_own_ms, g.ranks[0]))


def _histogram(rows: Sequence[RankStats]) -> list[HistogramBin]:
    """Data wait per rank in equal bins from 0 to the largest wait: one bin per rank up to :data:`DATA_WAIT_BINS`."""
    count = min(len(rows), DATA_WAIT_BINS)
    top = max(r.data_wait_ms for r in rows)
    if top <= 0:
        return [HistogramBin(0.0, 0.0, tuple(r.rank for r in rows))]
    width = top / count
    members: list[list[int]] = [[] for _ in range(count)]
    for r in rows:
        members[min(count - 1, int(r.data_wait_ms / width))].append(r.rank)
    return [HistogramBin(i * width, (i + 1) * width, tuple(m)) for i, m in enumerate(members)]


def _heat_map(rows: Sequence[RankStats]) -> StepHeatMap:
    steps = sorted({number for r in rows for number, _ in r.per_step_ms})
    cells = []
    for r in rows:
        by_step = dict(r.per_step_ms)
        cells.append(tuple(by_step.get(number) for number in steps))
    known = [v for row in cells for v in row if v is not None]
    return StepHeatMap(
        ranks=tuple(r.rank for r in rows),
        steps=tuple(steps),
        step_ms=tuple(cells),
        lo_ms=min(known, default=0.0),
        hi_ms=max(known, default=0.0),
    )


def summarize_ranks(rows: Sequence[RankStats]) -> JobSummary:
    """The ranks summed up (at least one): the spread of step time, data wait and collectives over them, the
    :data:`SLOWEST_RANKS` slowest with why and who waited for each, the ranks by machine, and the pictures' data."""
    rows = sorted(rows, key=lambda r: r.rank)
    return JobSummary(
        step=_spread(rows, lambda r: r.step_ms),
        data_wait=_spread(rows, lambda r: r.data_wait_ms),
        collectives=_spread(rows, lambda r: r.collective_ms),
        slowest=[_slow_rank(r, rows) for r in sorted(rows, key=slowness)[:SLOWEST_RANKS]],
        nodes=_nodes(rows),
        data_wait_histogram=_histogram(rows),
        heat_map=_heat_map(rows),
    )


#: A world size beyond this is taken for a malformed manifest, not a job: no rank is then called missing.
MAX_WORLD_SIZE = 1 << 20


def missing_ranks(present: Iterable[int | None], world_sizes: Iterable[int | None]) -> tuple[int, ...]:
    """The ranks of the job's world (the largest of ``world_sizes``, one per trace as its manifest says) that left no
    trace: not among ``present`` (a rank of None is rank 0, as everywhere). A node whose run directory was not given,
    a rank that crashed before its window. Empty when the world size is unknown."""
    world = max((size for size in world_sizes if size), default=0)
    if world > MAX_WORLD_SIZE:
        return ()
    seen = {rank if rank is not None else 0 for rank in present}
    return tuple(rank for rank in range(world) if rank not in seen)
