"""One stretch of the step clock at one DataLoader setting, measured in steady state: a trial's segment
(dlprof.analysis.trials), or the training after the trials at its chosen setting (dlprof.analysis.tuned).

dlprof.analysis.trials' docstring says how: cut at the pauses, the refill transient left out after each, steps over
time. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from dlprof.analysis.batch_widths import Scaler
from dlprof.core import throughput
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, LoaderConfig, Manifest, StepClock, TrialSegment
from dlprof.results.analysis import Throughput


def switched_loader(manifest: Manifest) -> LoaderConfig | None:
    """The DataLoader the trials switched (``Trials.loader``), else the run's training loader."""
    trials = manifest.trials
    loaders = [c for c in (manifest.loader, *manifest.loaders) if c is not None]
    if trials is not None and trials.loader is not None:
        found = next((c for c in loaders if c.id == trials.loader), None)
        if found is not None:
            return found
    return manifest.loader


@dataclass(frozen=True, kw_only=True)
class Piece:
    """A stretch of a segment between two pauses: steps ``start`` to ``stop`` of the step clock, ``left_out`` of them
    the transient after the pause at ``start`` (an epoch start when ``boundary``, else the switch)."""

    start: int
    stop: int
    left_out: int
    boundary: bool
    #: The transient ended where every worker was busy again, not after their waits: a surplus may be left, measured.
    surplus_left: bool = False


def segment_pieces(
    clock: StepClock, segment: TrialSegment, queues: tuple[int, int], busy_at: int, started: bool = True
) -> list[Piece]:
    """``queues``: the queue after the switch, and after an epoch start; ``busy_at``: ready batches at or below which
    every worker is busy (:func:`dlprof.core.throughput.all_busy_below`); ``started``: the segment began by starting
    workers (a switch; not the padding segment, which keeps the workers it follows).

    The segment cut at its pauses (its first step, every epoch start inside it), each piece's refill transient left
    out (:func:`dlprof.core.throughput.transient`), at least :data:`~dlprof.core.manifest.EPOCH_SETTLE_STEPS` where
    workers were started."""
    stop = min(segment.first_step + segment.steps, len(clock))
    if segment.first_step >= stop:
        return []
    starts = [segment.first_step] + [i for i in range(segment.first_step + 1, stop) if clock.epoch_start[i]]
    pieces = []
    for k, (a, b) in enumerate(zip(starts, [*starts[1:], stop])):
        args = (
            clock.wall_ms[a:b],
            clock.wait_ms[a:b],
            queues[0] if k == 0 else queues[1],
            segment.num_workers,
            clock.ready[a:b],
            busy_at,
        )
        left, surplus_left = throughput.transient(*args)
        if segment.num_workers and ((k == 0 and started) or (k > 0 and not segment.persistent_workers)):
            left = max(left, min(EPOCH_SETTLE_STEPS, b - a))  # workers were started: forking slows the next steps
        pieces.append(Piece(start=a, stop=b, left_out=left, boundary=k > 0, surplus_left=surplus_left))
    return pieces


def steady_steps(pieces: Iterable[Piece]) -> list[int]:
    """The step clock's indices of the steady steps of ``pieces``: each piece's steps after its transient."""
    return [i for p in pieces for i in range(p.start + p.left_out, p.stop)]


def steady_speed(
    clock: StepClock, pieces: list[Piece], batches_per_step: float, workers: int, scaler: Scaler | None = None
) -> Throughput | None:
    """The steady steps of ``pieces`` (:func:`segment_pieces`) as one speed: steps over time, less the steps a surplus
    still there carried (``StepClock.ready``, :func:`dlprof.core.throughput.surplus_steps`); with a ``scaler``, on
    the steps' times scaled to the run's mean batch (:mod:`dlprof.analysis.batch_widths`)."""
    steps = steady_steps(pieces)
    surplus = sum(
        throughput.surplus_steps(clock.ready, p.start + p.left_out, p.stop - 1, batches_per_step, max(1, workers))
        for p in pieces
        if p.surplus_left
    )
    measured = throughput.measure([clock.wall_ms[i] for i in steps], surplus=surplus)
    if measured is None:
        return None
    measured = replace(measured, transient_steps=sum(p.left_out for p in pieces))
    scaled = throughput.measure(scaler.wall_ms(clock, steps), surplus=surplus) if scaler is not None else None
    if scaled is None:
        return measured
    return replace(
        scaled,
        transient_steps=measured.transient_steps,
        width_scaled_pct=100 * (scaled.steps_per_s / measured.steps_per_s - 1),
    )
