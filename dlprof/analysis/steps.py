"""Where each step's time goes on the host: every microsecond assigned to one category, by priority.

As the PyTorch TensorBoard plugin did, a microsecond that several things claim goes to the first of:

1. ``data_wait``  the main thread inside ``enumerate(DataLoader)#...__next__``
2. ``h2d``        host copy ops (``aten::to``/``copy_``) that queued a host-to-device memcpy
3. ``optimizer``  ``Optimizer.step#...`` and ``Optimizer.zero_grad#...``
4. ``backward``   from the first to the last autograd-engine op of the step (any thread: on CUDA
                  the engine runs on its own thread while the main thread waits in ``backward()``)
5. ``forward``    main-thread ops before the backward window (all ops if the step has no backward)
6. ``other``      the rest: Python between ops, logging, ops after the backward outside the optimizer

The categories never overlap and add up to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlprof.analysis.intervals import Timeline, intersect, subtract, total
from dlprof.analysis.stats import summarize
from dlprof.core.errors import NoStepsError
from dlprof.results.analysis import CATEGORIES, StepBreakdown, StepTime
from dlprof.trace.run import TraceRun


@dataclass(frozen=True)
class TimelineBar:
    """A stretch of one step's time assigned to one category, as a timeline draws it."""

    category: str
    start_us: float
    end_us: float


def _assign(
    lo: float, hi: float, claims: list[tuple[str, Timeline]], backward: Timeline, host: Timeline
) -> dict[str, list[tuple[float, float]]]:
    """The intervals of ``[lo, hi)`` each category gets, by priority."""
    remaining = [(lo, hi)]
    taken: dict[str, list[tuple[float, float]]] = {}
    for category, timeline in claims:
        taken[category] = intersect(remaining, timeline.clip(lo, hi))
        remaining = subtract(remaining, taken[category])
    window = backward.clip(lo, hi)
    backward_start = window[0][0] if window else hi
    taken["backward"] = intersect(remaining, [(backward_start, window[-1][1])] if window else [])
    remaining = subtract(remaining, taken["backward"])
    taken["forward"] = intersect(remaining, host.clip(lo, backward_start))
    taken["other"] = subtract(remaining, taken["forward"])
    return taken


def _timelines(
    run: TraceRun, lo: float = float("-inf"), hi: float = float("inf")
) -> tuple[list[tuple[str, Timeline]], Timeline, Timeline]:
    """The claiming timelines, built from the events that overlap ``[lo, hi]`` only."""
    near = lambda spans: [(s.start_us, s.end_us) for s in spans if s.end_us > lo and s.start_us < hi]
    claims = [
        ("data_wait", Timeline(near(run.next_calls))),
        ("h2d", Timeline(near(run.h2d_host))),
        ("optimizer", Timeline(near(run.optimizer))),
    ]
    return claims, Timeline(near(run.backward)), Timeline(near(run.host_ops))


def step_bars(run: TraceRun, first: int, count: int) -> list[TimelineBar]:
    """Category bars of ``count`` consecutive steps from step index ``first``, in time order."""
    shown = run.steps[first : first + count]
    claims, backward, host = _timelines(
        run, shown[0].start_us, shown[-1].end_us
    )  # a few steps need only their own events
    bars = []
    for step in shown:
        for category, intervals in _assign(step.start_us, step.end_us, claims, backward, host).items():
            bars += [TimelineBar(category, s, e) for s, e in intervals]
    return sorted(bars, key=lambda g: g.start_us)


def bars_between(run: TraceRun, lo_us: float, hi_us: float) -> list[TimelineBar]:
    """Category bars of the steps that overlap ``[lo_us, hi_us]`` (the trace's clock), clipped to it."""
    shown = [step for step in run.steps if step.end_us > lo_us and step.start_us < hi_us]
    if not shown:
        return []
    claims, backward, host = _timelines(run, shown[0].start_us, shown[-1].end_us)
    bars = []
    for step in shown:
        for category, intervals in _assign(step.start_us, step.end_us, claims, backward, host).items():
            bars += [
                TimelineBar(category, max(s, lo_us), min(e, hi_us)) for s, e in intervals if e > lo_us and s < hi_us
            ]
    return sorted(bars, key=lambda g: g.start_us)


def bars_by_step(run: TraceRun, count: int) -> list[tuple[TimelineBar, ...]]:
    """The category bars of each of the first ``count`` steps, unclipped, in the order
    :func:`bars_between` meets them: clipping them to a stretch gives what it gives for that stretch."""
    shown = run.steps[:count]
    if not shown:
        return []
    claims, backward, host = _timelines(run, shown[0].start_us, shown[-1].end_us)
    return [
        tuple(
            TimelineBar(category, s, e)
            for category, intervals in _assign(step.start_us, step.end_us, claims, backward, host).items()
            for s, e in intervals
        )
        for step in shown
    ]


def step_breakdown(run: TraceRun) -> StepBreakdown:
    """Break every ProfilerStep of ``run`` down by category.

    Raises:
        NoStepsError: the trace has no ``ProfilerStep#N`` events.
    """
    if not run.steps:
        raise NoStepsError(
            f"{run.path}: no ProfilerStep#N events; profile with torch.profiler.profile(schedule=...) and call "
            "prof.step() once per training step (or record with 'dlprof record')"
        )
    claims, backward, host = _timelines(run)
    steps = []
    for step in run.steps:
        taken = _assign(step.start_us, step.end_us, claims, backward, host)
        spent = {c: total(taken[c]) / 1000 for c in CATEGORIES}
        steps.append(
            StepTime(
                number=step.number,
                start_us=step.start_us,
                step_ms=(step.end_us - step.start_us) / 1000,
                **{f"{c}_ms": spent[c] for c in CATEGORIES},
            )
        )
    return StepBreakdown(
        steps=steps,
        step=summarize([s.step_ms for s in steps]),
        categories={c: summarize([s.category_ms(c) for s in steps]) for c in CATEGORIES},
    )
