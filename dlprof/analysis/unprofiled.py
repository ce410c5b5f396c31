"""The training's real speed, without the profiler: from the manifest's step clock.

``dlprof record`` times every training step with cheap clocks, profiled or not. Steps after the
profiler window (the reference steps) are what the user's own training does; steps inside it are
slower by the profiler's per-operator cost. This module measures both, the profiler overhead, the
consumer's unprofiled time, and what an epoch boundary costs (workers restarting).

The speed is measured as :mod:`dlprof.core.throughput` says: steady state only, steps over time. The
reference steps are cut at every pause of the main process (the profiler's export before the first
of them, every epoch start, the fork probe); after each, the refill transient is left out
(:func:`dlprof.core.throughput.transient_steps`: the export leaves the prefetch queue full, an epoch start
leaves it empty), and so are the settling steps after an epoch start or the fork probe, whose excess
is the restart's (or the fork's) cost. The speed is all the steady steps over all their time (with
variable-length batches a long sequence is part of the real speed, not noise), and the consumer's,
CPU and wait times are means over the same steps. Whole epochs are measured as they are: all their
steps over all their time, restarts included.

The profiler's overhead compares medians of profiled and unprofiled steps instead: it is a ratio of
typical steps (one slow step on either side must not move it), not a throughput.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from dlprof.core import throughput
from dlprof.core.manifest import (
    EPOCH_SETTLE_STEPS,
    PHASE_AFTER,
    PHASE_BEFORE,
    PHASE_PROFILED,
    LoaderConfig,
    Manifest,
    StepClock,
)
from dlprof.results.analysis import EpochStats, PageFaults, PlainLaunchStats, Throughput, UnprofiledStats
from dlprof.results.record import PlainLaunch

#: The main process's page faults make its speed volatile when its kernel time is at least this share of the step
#: and it takes at least :data:`VOLATILE_FAULTS` faults per step: glibc's malloc settles on a fault level by chance at
#: each launch, enough to set launches apart (docs/ARCHITECTURE.md#facts-the-code-relies-on).
VOLATILE_SYS_PCT = 5.0
VOLATILE_FAULTS = 1000
#: Unprofiled steps before the window that give a page-fault level (the first, start-up, left out).
MIN_BEFORE_STEPS = 3

#: Fewer steady reference steps than this give no unprofiled speed at all (the profiled steps stand in); from
#: here up to :data:`dlprof.core.throughput.MIN_STEPS` steps (and :data:`~dlprof.core.throughput.MIN_SECONDS`) the speed
#: is reported as too short to trust.
MIN_REFERENCE_STEPS = 3


def _whole_epochs(clock: StepClock) -> range | None:
    """The epochs timed whole and unprofiled: from the first epoch start after the window to the last one."""
    starts = [i for i, started in enumerate(clock.epoch_start) if started and clock.phase[i] == PHASE_AFTER]
    while len(starts) >= 2 and any(clock.fork_probe[starts[0] : starts[-1]]):
        starts.pop(0)  # the fork probe's steps are not the training's own
    return range(starts[0], starts[-1]) if len(starts) >= 2 else None


def _delivery(manifest: Manifest) -> tuple[int, int, int]:
    """The training loader's prefetch queue in steps (0 without workers or a known loader), its workers, and the
    steps of one round of their delivery (a batch from each worker; 1 without workers)."""
    loader, clock = manifest.loader, manifest.step_clock
    if loader is None or not loader.num_workers:
        return 0, 0, 1
    after = [b for p, b in zip(clock.phase, clock.batches) if p == PHASE_AFTER]
    batches_per_step = max(1.0, statistics.fmean(after)) if after else 1.0  # as the same steps got them
    queue = throughput.queue_steps(loader.num_workers, loader.prefetch_factor, batches_per_step)
    return queue, loader.num_workers, max(1, round(loader.num_workers / batches_per_step))


def _flagged(column: tuple[bool, ...], i: int) -> bool:
    """``column[i]``, False where the column is shorter (an older manifest lacks the fork probe)."""
    return i < len(column) and column[i]


def _segments(clock: StepClock, steps: range) -> list[range]:
    """``steps``' unprofiled steps cut at every pause of the main process: a segment begins at the first step after
    the window (the export), at an epoch start, or after the fork probe, and runs to the next such step."""
    after = [i for i in steps if clock.phase[i] == PHASE_AFTER]
    segments: list[range] = []
    for i in after:
        if (
            segments
            and segments[-1].stop == i
            and not _flagged(clock.epoch_start, i)
            and not _flagged(clock.fork_probe, i)
        ):
            segments[-1] = range(segments[-1].start, i + 1)
        else:
            segments.append(range(i, i + 1))
    return segments


def _left_out(clock: StepClock, segment: range, queue: int, workers: int, busy_at: int) -> tuple[int, bool]:
    """How many of ``segment``'s first steps are not steady: its refill transient, and at least the settling steps
    after an epoch start or the fork probe; and whether a surplus may be left after them
    (:attr:`dlprof.core.throughput.Transient.surplus_left`)."""
    a, b = segment.start, segment.stop
    args = (clock.wall_ms[a:b], clock.wait_ms[a:b], queue, workers, clock.ready[a:b], busy_at)
    transient, surplus_left = throughput.transient(*args)
    if _flagged(clock.epoch_start, a) or _flagged(clock.fork_probe, a):
        transient = max(transient, EPOCH_SETTLE_STEPS)
    return min(transient, len(segment)), surplus_left


@dataclass(frozen=True, kw_only=True)
class _Steady:
    """The steady reference steps, by segment (indices into the step clock, each segment's in whole rounds of the
    workers' delivery), the steps left out at each segment's first step, the round's steps, and the whole epochs
    the segments lie in (None where they are not whole epochs')."""

    segments: list[list[int]]
    left_out: dict[int, int]
    period: int
    epochs: range | None
    #: Per segment: its transient ended where every worker was busy again, and a surplus may be left to measure.
    surplus_left: list[bool] = field(default_factory=list)

    @property
    def indices(self) -> list[int]:
        return [i for segment in self.segments for i in segment]


def _steady(manifest: Manifest) -> _Steady:
    """The steady reference steps of ``manifest``'s step clock (:class:`_Steady`).

    Each segment's steady steps are cut to whole rounds (:func:`dlprof.core.throughput.whole_periods`): they begin at a
    step that waited, the start of a round, and a stretch that ended mid-round would count one kind of step once
    too often."""
    clock = manifest.step_clock
    whole = _whole_epochs(clock)
    queue, workers, period = _delivery(manifest)
    busy_at = throughput.all_busy_below(workers, manifest.loader.prefetch_factor if manifest.loader else None)
    segments: list[list[int]] = []
    left_out: dict[int, int] = {}
    surplus_left: list[bool] = []
    for segment in _segments(clock, whole if whole is not None else range(len(clock))):
        skip, surplus = _left_out(clock, segment, queue, workers, busy_at)
        left_out[segment.start] = skip
        kept = list(segment[skip:])
        segments.append(kept[: throughput.whole_periods(len(kept), period)])
        surplus_left.append(surplus)
    return _Steady(segments=segments, left_out=left_out, period=period, epochs=whole, surplus_left=surplus_left)


def _speed(clock: StepClock, steady: _Steady) -> Throughput | None:
    """All the steady steps over all their time, with the steps left out. The spread: over whole epochs, the range
    of the epochs' own steady rates (each epoch has every batch length once, so its parts would differ by the
    lengths they drew, far more than the epochs differ: scripts/measure_variation.py); else the range of the steady
    steps' sub-windows."""
    walls = [[clock.wall_ms[i] for i in segment] for segment in steady.segments]
    surpluses = [
        _surplus(clock, segment, steady.period) if left else 0.0
        for segment, left in zip(steady.segments, steady.surplus_left)
    ]
    if steady.epochs is not None and sum(1 for w in walls if w) > 1:
        measured = (throughput.measure(w, period=steady.period, surplus=x) for w, x in zip(walls, surpluses) if w)
        speed = throughput.combine([m for m in measured if m is not None])
    else:
        speed = throughput.measure([ms for w in walls for ms in w], period=steady.period, surplus=sum(surpluses))
    return None if speed is None else replace(speed, transient_steps=sum(steady.left_out.values()))


def _surplus(clock: StepClock, segment: list[int], period: int) -> float:
    """Steps of the contiguous steady ``segment`` that a surplus made before it carried
    (:func:`dlprof.core.throughput.surplus_steps`)."""
    if len(segment) < 2:
        return 0.0
    per_step = max(1.0, statistics.fmean(clock.batches[i] for i in segment)) if clock.batches else 1.0
    return throughput.surplus_steps(clock.ready, segment[0], segment[-1], per_step, period)


def reference_step_indices(manifest: Manifest) -> list[int]:
    """The steps the unprofiled speed is measured on (indices into the step clock): the steady reference steps.

    When whole epochs were timed after the window, only theirs (every batch length once per epoch); and
    never a step of a refill transient, or settling after an epoch start or the fork probe.
    ``dlprof record``'s closing message counts these too.
    """
    return _steady(manifest).indices


def _excess_ms(clock: StepClock, start: int, baseline_ms: float, span: int = EPOCH_SETTLE_STEPS) -> float | None:
    """What ``span`` steps from ``start`` took beyond ``baseline_ms`` each; None if they ran in different phases."""
    steps = range(start, start + span)
    if steps.stop > len(clock) or any(clock.phase[j] != clock.phase[start] for j in steps):
        return None
    return max(0.0, sum(clock.wall_ms[j] - baseline_ms for j in steps))


def _whole_epoch_speed(clock: StepClock, whole: range | None) -> Throughput | None:
    """All the whole epochs' steps over all their time (restarts included); the spread is the range of the epochs'
    own rates."""
    if whole is None:
        return None
    starts = [i for i in whole if _flagged(clock.epoch_start, i)] + [whole.stop]
    measured = [throughput.measure(clock.wall_ms[a:b]) for a, b in zip(starts, starts[1:])]
    epochs = [e for e in measured if e is not None]
    if len(epochs) == 1:  # one epoch: its sub-windows differ by the restart in the first; no spread is known
        return replace(epochs[0], spread_pct=0.0, trusted=throughput.enough(epochs[0].steps, epochs[0].seconds))
    return throughput.combine(epochs)


def _restarts(
    clock: StepClock, whole: range | None, left_out: dict[int, int], profiled: list[float], steady_ms: float
) -> list[float]:
    """The excess of every epoch boundary after start-up, against its phase's mean step (a mean: long batches among
    the settling steps are no excess on average); the whole epochs' own boundaries, when there are some."""
    restarts = []
    starts = [i for i, started in enumerate(clock.epoch_start) if started]
    for i in [i for i in starts if i in whole] if whole is not None else starts:
        phase = clock.phase[i]
        if phase == PHASE_AFTER:
            # Over the steps left out after it: the settling steps, and the refill of the empty queue.
            extra = _excess_ms(clock, i, steady_ms, max(EPOCH_SETTLE_STEPS, left_out.get(i, 0)))
        elif phase == PHASE_PROFILED and profiled:
            extra = _excess_ms(clock, i, statistics.fmean(profiled))
            extra = (
                None if extra is None else extra * steady_ms / statistics.fmean(profiled)
            )  # the profiler slowed these too
        else:
            continue
        if extra is not None:
            restarts.append(extra)
    return restarts


def _epoch_stats(
    clock: StepClock,
    whole: range | None,
    loader: LoaderConfig,
    batches_per_step: float,
    profiled: list[float],
    steady_ms: float,
    left_out: dict[int, int],
) -> EpochStats:
    """``whole``: the epochs timed whole (:func:`_whole_epochs`); ``profiled``: the profiled steps' wall times,
    settling steps left out; ``steady_ms``: the unprofiled mean step."""
    restarts = _restarts(clock, whole, left_out, profiled, steady_ms)
    probes = [i for i, probed in enumerate(clock.fork_probe) if probed]
    fork_probe = _excess_ms(clock, probes[0], steady_ms) if probes else None
    firsts = [e.first_batch_ms for e in loader.epochs if e.first_batch_ms is not None]
    ends = [e.end_ms for e in loader.epochs if e.end_ms is not None]
    epochs = _whole_epoch_speed(clock, whole)
    return EpochStats(
        steps_per_epoch=loader.length / batches_per_step if loader.length else None,
        persistent_workers=bool(loader.persistent_workers),
        num_workers=loader.num_workers or 0,
        restart_ms=statistics.median(restarts) if restarts else None,
        boundaries_measured=len(restarts),
        first_batch_ms=statistics.median(firsts) if firsts else None,
        end_ms=statistics.median(ends) if ends else None,
        whole_epoch_steps_per_s=epochs.steps_per_s if epochs is not None else None,
        fork_probe_ms=fork_probe,
        whole_epoch_speed=epochs,
    )


def _settling_profiled(clock: StepClock) -> list[float]:
    """The profiled steps' wall times, but those settling after an epoch start or the fork probe."""
    near: set[int] = set()
    for i in range(len(clock)):
        if _flagged(clock.epoch_start, i) or _flagged(clock.fork_probe, i):
            near.update(range(i, i + EPOCH_SETTLE_STEPS))
    return [clock.wall_ms[i] for i, p in enumerate(clock.phase) if p == PHASE_PROFILED and i not in near]


def page_faults(clock: StepClock, steady: list[int], step_ms: float) -> PageFaults | None:
    """The main process's page faults and kernel time per step over the ``steady`` steps (``step_ms`` their mean),
    and the level the unprofiled steps before the window each kept (their least: a training's start-up takes its
    one-off faults in some of them, and a level that lasts is in every one); None where the recording lacks them."""
    if not clock.faults or not clock.sys_ms or not steady:
        return None
    faults = statistics.fmean(clock.faults[i] for i in steady)
    sys_ms = statistics.fmean(clock.sys_ms[i] for i in steady)
    before = [i for i, phase in enumerate(clock.phase) if phase == PHASE_BEFORE][1:]
    enough = len(before) >= MIN_BEFORE_STEPS
    sys_pct = 100 * sys_ms / step_ms if step_ms > 0 else 0.0
    return PageFaults(
        faults_per_step=faults,
        sys_ms=sys_ms,
        sys_pct=sys_pct,
        before_faults_per_step=min(clock.faults[i] for i in before) if enough else None,
        before_sys_ms=min(clock.sys_ms[i] for i in before) if enough else None,
        volatile=sys_pct >= VOLATILE_SYS_PCT and faults >= VOLATILE_FAULTS,
        before_steps=len(before) if enough else 0,
        before_consumer_ms=statistics.fmean(_consumer_ms(clock, i) for i in before) if enough else None,
    )


def _consumer_ms(clock: StepClock, i: int) -> float:
    """Step ``i`` less its data wait and the training thread's wait for a core."""
    return max(0.0, clock.wall_ms[i] - clock.wait_ms[i] - clock.runq_ms[i])


def distrust(speed: Throughput) -> str | None:
    """Why ``speed`` is not to be trusted, in words (None when it is): too few steps or seconds, or too wide a
    spread."""
    if speed.trusted:
        return None
    why = []
    if speed.steps < throughput.MIN_STEPS:
        why.append(f"only {speed.steps} steady steps (fewer than {throughput.MIN_STEPS})")
    if speed.seconds < throughput.MIN_SECONDS:
        why.append(f"only {speed.seconds:.3g} s of them (less than {throughput.MIN_SECONDS:g} s)")
    if speed.spread_pct > throughput.MAX_SPREAD_PCT:
        why.append(f"a spread of {speed.spread_pct:.1f} % (more than {throughput.MAX_SPREAD_PCT:g} %)")
    return " and ".join(why) or None


def plain_launch_stats(
    clock: StepClock,
    steady: list[int],
    speed: Throughput,
    whole: range | None,
    epoch: EpochStats | None,
    plain: PlainLaunch,
) -> PlainLaunchStats | None:
    """The recording's steady reference steps (``steady``, at ``speed``) and whole epochs (``whole``) against the plain
    launch's times of the same steps: each plain speed is the recording's times the ratio of their times over those
    steps. None where the launch timed fewer than :data:`MIN_REFERENCE_STEPS` of them."""
    timed = len(plain.step_ms)
    both = [i for i in steady if i < timed]
    if len(both) < MIN_REFERENCE_STEPS:
        return None
    recorded_ms = sum(clock.wall_ms[i] for i in both)
    plain_ms = sum(plain.step_ms[i] for i in both)
    if recorded_ms <= 0 or plain_ms <= 0:
        return None
    # Where the launch ended early, the recording's speed over the steps it timed too.
    recorded = speed.steps_per_s if len(both) == len(steady) else 1000 * len(both) / recorded_ms
    whole_speed = epoch.whole_epoch_steps_per_s if epoch is not None else None
    epoch_fields: dict = {}
    if whole is not None and whole_speed and whole.stop <= timed:
        recorded_epochs_ms = sum(clock.wall_ms[i] for i in whole)
        plain_epochs_ms = sum(plain.step_ms[i] for i in whole)
        if recorded_epochs_ms > 0 and plain_epochs_ms > 0:
            epoch_fields = {
                "epoch_steps": len(whole),
                "recorded_epoch_steps_per_s": whole_speed,
                "plain_epoch_steps_per_s": whole_speed * recorded_epochs_ms / plain_epochs_ms,
            }
    return PlainLaunchStats(
        steps=len(both),
        recorded_steps_per_s=recorded,
        plain_steps_per_s=recorded * recorded_ms / plain_ms,
        **epoch_fields,
    )


def unprofiled_stats(
    manifest: Manifest | None, batches_per_step: float, plain: PlainLaunch | None = None
) -> UnprofiledStats | None:
    """Unprofiled speed of a run recorded with reference steps; ``None`` when it has too few steady ones. With
    ``plain``, the same steps in a launch without the profiler (:func:`plain_launch_stats`).

    When whole epochs were timed after the window, the steady speed is measured inside them (every
    batch length once per epoch); else over all reference steps. Either way only steady steps count
    (module docstring).
    """
    if manifest is None or not len(manifest.step_clock):
        return None
    clock = manifest.step_clock
    found = _steady(manifest)
    steady, left_out = found.indices, found.left_out
    speed = _speed(clock, found)
    if len(steady) < MIN_REFERENCE_STEPS or speed is None:
        return None
    profiled = _settling_profiled(clock)
    mean = lambda column: statistics.fmean(column[i] for i in steady)
    consumer = statistics.fmean(_consumer_ms(clock, i) for i in steady)
    steady_ms = 1000 / speed.steps_per_s  # the mean steady step: seconds over steps
    epoch = (
        _epoch_stats(clock, found.epochs, manifest.loader, batches_per_step, profiled, steady_ms, left_out)
        if manifest.loader is not None
        else None
    )
    return UnprofiledStats(
        reference_steps=len(steady),
        step_ms=steady_ms,
        profiled_steps=len(profiled),
        step_ms_p50=statistics.median(clock.wall_ms[i] for i in steady),
        profiled_step_ms=statistics.median(profiled) if profiled else None,
        consumer_ms=consumer,
        wait_ms=mean(clock.wait_ms),
        cpu_ms=mean(clock.cpu_ms),
        runq_ms=mean(clock.runq_ms),
        epoch=epoch,
        speed=speed,
        distrust=distrust(speed),
        page_faults=page_faults(clock, steady, steady_ms),
        plain_launch=plain_launch_stats(clock, steady, speed, found.epochs, epoch, plain)
        if plain is not None
        else None,
    )
