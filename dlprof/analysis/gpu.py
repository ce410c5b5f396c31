"""GPU busy and idle time per step, and why the GPU sat idle.

Busy: any kernel, memcpy or memset on any stream. Each idle gap inside a step is split into:

* ``data``   the host was inside DataLoader ``__next__`` (waiting for a batch);
* ``launch`` the host had not yet launched the work that ends the gap (the launch call started
             after the gap began): the GPU waited for the host;
* ``other``  the rest (synchronisation, dependencies, the step's tail).

Computed on the raw events, so it works without HTA; HTA's idle-time breakdown is optional and goes
through :mod:`dlprof.analysis.hta_adapter`.
"""

from __future__ import annotations

import bisect

from dlprof.analysis.intervals import Timeline, intersect, subtract, total, union
from dlprof.analysis.stats import summarize
from dlprof.results.analysis import GpuStats, GpuStep
from dlprof.trace.run import TraceRun


def gpu_stats(run: TraceRun) -> GpuStats | None:
    """GPU statistics per ProfilerStep, or ``None`` when the trace has no GPU activity."""
    if not run.gpu or not run.steps:
        return None
    busy_timeline = Timeline((g.start_us, g.end_us) for g in run.gpu)
    h2d_timeline = Timeline((g.start_us, g.end_us) for g in run.gpu if g.h2d)
    waiting = Timeline((c.start_us, c.end_us) for c in run.next_calls)
    launch_by_correlation = {
        launch.correlation: launch.start_us for launch in run.launches if launch.correlation is not None
    }
    gpu_starts = [g.start_us for g in run.gpu]
    steps = []
    for step in run.steps:
        lo, hi = step.start_us, step.end_us
        busy = busy_timeline.clip(lo, hi)
        gaps = subtract([(lo, hi)], busy)
        data = intersect(gaps, waiting.clip(lo, hi))
        rest = subtract(gaps, data)
        launch_wait = []
        for gap_start, gap_end in rest:
            # the first GPU activity at or after the gap's end is what the gap waited for
            i = bisect.bisect_left(gpu_starts, gap_end)
            if i >= len(run.gpu):
                continue
            correlation = run.gpu[i].correlation
            launched = None if correlation is None else launch_by_correlation.get(correlation)
            if launched is not None and launched > gap_start:
                launch_wait.append((gap_start, min(launched, gap_end)))
        launch_wait = union(launch_wait)
        idle = total(gaps)
        steps.append(
            GpuStep(
                number=step.number,
                busy_ms=total(busy) / 1000,
                idle_ms=idle / 1000,
                idle_data_ms=total(data) / 1000,
                idle_launch_ms=total(launch_wait) / 1000,
                idle_other_ms=(idle - total(data) - total(launch_wait)) / 1000,
                h2d_ms=total(h2d_timeline.clip(lo, hi)) / 1000,
            )
        )
    h2d = [g for g in run.gpu if g.h2d and run.steps[0].start_us <= g.start_us < run.steps[-1].end_us]
    step_total = sum(s.busy_ms + s.idle_ms for s in steps)
    of = lambda attr: summarize([getattr(s, attr) for s in steps])
    return GpuStats(
        steps=steps,
        busy=of("busy_ms"),
        idle=of("idle_ms"),
        idle_data=of("idle_data_ms"),
        idle_launch=of("idle_launch_ms"),
        idle_other=of("idle_other_ms"),
        h2d=of("h2d_ms"),
        busy_pct=100 * sum(s.busy_ms for s in steps) / step_total if step_total else 0.0,
        h2d_copies=len(h2d),
        h2d_pageable_copies=sum(1 for g in h2d if not g.pinned),
        h2d_pinned_copies=sum(1 for g in h2d if g.pinned),
        h2d_mib_per_step=sum(g.bytes for g in h2d) / 2**20 / len(steps),
    )
