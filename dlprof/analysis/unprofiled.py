"""The training's real speed, without the profiler: from the manifest's step clock.

``dlprof record`` times every training step with cheap clocks, profiled or not. Steps after the
profiler window (the reference steps) are what the user's own training does; steps inside it are
slower by the profiler's per-operator cost. This module measures both, the profiler overhead, the
consumer's unprofiled time, and what an epoch boundary costs (workers restarting).

Throughput is total time over steps, so the speed and the consumer's time are means over the
reference steps (with variable-length batches a long sequence is part of the real speed, not noise);
the profiler's overhead compares medians, so that one slow step on either side does not move it.
"""

from __future__ import annotations

import statistics

from dlprof.manifest import EPOCH_SETTLE_STEPS, PHASE_AFTER, PHASE_PROFILED, LoaderConfig, Manifest, StepClock
from dlprof.results.analysis import EpochStats, UnprofiledStats

#: Fewer reference steps than this make the unprofiled speed unreliable.
MIN_REFERENCE_STEPS = 5


def _settling(flags: tuple[bool, ...]) -> set[int]:
    """Steps inside the settling period of a flagged step (an epoch start, the fork probe)."""
    near = set()
    for i, flagged in enumerate(flags):
        if flagged:
            near.update(range(i, i + EPOCH_SETTLE_STEPS))
    return near


def _whole_epochs(clock: StepClock) -> range | None:
    """The epochs timed whole and unprofiled: from the first epoch start after the window to the last one."""
    starts = [i for i, started in enumerate(clock.epoch_start) if started and clock.phase[i] == PHASE_AFTER]
    while len(starts) >= 2 and any(clock.fork_probe[starts[0] : starts[-1]]):
        starts.pop(0)  # the fork probe's steps are not the training's own
    return range(starts[0], starts[-1]) if len(starts) >= 2 else None


def _excess_ms(clock: StepClock, start: int, baseline_ms: float) -> float | None:
    """What the settling steps from ``start`` took beyond ``baseline_ms`` each; None if they ran in different phases."""
    span = range(start, start + EPOCH_SETTLE_STEPS)
    if span.stop > len(clock) or any(clock.phase[j] != clock.phase[start] for j in span):
        return None
    return max(0.0, sum(clock.wall_ms[j] - baseline_ms for j in span))


def _epoch_stats(
    clock: StepClock,
    loader: LoaderConfig,
    batches_per_step: float,
    profiled: list[float],
    steady_ms: float,
    whole: range | None,
) -> EpochStats:
    """``profiled``: the profiled steps' wall times, settling steps left out; ``steady_ms``: the unprofiled mean
    step."""
    restarts = []
    # Boundaries after start-up, against their phase's mean step (a mean: long batches among the settling
    # steps are no excess on average). The whole epochs' own boundaries, when there are some, are the ones to use.
    starts = [i for i, started in enumerate(clock.epoch_start) if started]
    for i in [i for i in starts if i in whole] if whole is not None else starts:
        phase = clock.phase[i]
        if phase == PHASE_AFTER:
            extra = _excess_ms(clock, i, steady_ms)
        elif phase == PHASE_PROFILED and profiled:
            extra = _excess_ms(clock, i, statistics.fmean(profiled))
            extra = (
                None if extra is None else extra * steady_ms / statistics.fmean(profiled)
            )  # the profiler slowed these too
        else:
            continue
        if extra is not None:
            restarts.append(extra)
    probes = [i for i, probed in enumerate(clock.fork_probe) if probed]
    fork_probe = _excess_ms(clock, probes[0], steady_ms) if probes else None
    firsts = [e.first_batch_ms for e in loader.epochs if e.first_batch_ms is not None]
    ends = [e.end_ms for e in loader.epochs if e.end_ms is not None]
    return EpochStats(
        steps_per_epoch=loader.length / batches_per_step if loader.length else None,
        persistent_workers=bool(loader.persistent_workers),
        num_workers=loader.num_workers or 0,
        restart_ms=statistics.median(restarts) if restarts else None,
        boundaries_measured=len(restarts),
        first_batch_ms=statistics.median(firsts) if firsts else None,
        end_ms=statistics.median(ends) if ends else None,
        whole_epoch_steps_per_s=(
            1000 * len(whole) / sum(clock.wall_ms[whole.start : whole.stop]) if whole is not None else None
        ),
        fork_probe_ms=fork_probe,
    )


def reference_step_indices(clock: StepClock) -> list[int]:
    """The steps the unprofiled speed is measured on (indices into ``clock``): the reference steps after the window.

    When whole epochs were timed after the window, only theirs (every batch length once per epoch); and
    never a step settling after an epoch start or the fork probe, whose excess is the restart's (or the
    fork's) cost. ``dlprof record``'s closing message counts these too.
    """
    near = _settling(clock.epoch_start) | _settling(clock.fork_probe)
    whole = _whole_epochs(clock)
    candidates = whole if whole is not None else range(len(clock))
    return [i for i in candidates if clock.phase[i] == PHASE_AFTER and i not in near]


def unprofiled_stats(manifest: Manifest | None, batches_per_step: float) -> UnprofiledStats | None:
    """Unprofiled speed of a run recorded with reference steps; ``None`` when it has too few of them.

    When whole epochs were timed after the window, the steady speed is theirs (every batch length once
    per epoch); else all reference steps'. Steps settling after an epoch start or the fork probe are left out
    of the steady speed: their excess is the restart's (or the fork's) cost.
    """
    if manifest is None or not len(manifest.step_clock):
        return None
    clock = manifest.step_clock
    near = _settling(clock.epoch_start) | _settling(clock.fork_probe)
    whole = _whole_epochs(clock)
    after = reference_step_indices(clock)
    if len(after) < MIN_REFERENCE_STEPS or statistics.median(clock.wall_ms[i] for i in after) <= 0:
        return None
    profiled = [clock.wall_ms[i] for i, p in enumerate(clock.phase) if p == PHASE_PROFILED and i not in near]
    mean = lambda column: statistics.fmean(column[i] for i in after)
    consumer = statistics.fmean(max(0.0, clock.wall_ms[i] - clock.wait_ms[i] - clock.runq_ms[i]) for i in after)
    steady_ms = mean(clock.wall_ms)
    epoch = (
        _epoch_stats(clock, manifest.loader, batches_per_step, profiled, steady_ms, whole)
        if manifest.loader is not None
        else None
    )
    return UnprofiledStats(
        reference_steps=len(after),
        step_ms=steady_ms,
        profiled_steps=len(profiled),
        step_ms_p50=statistics.median(clock.wall_ms[i] for i in after),
        profiled_step_ms=statistics.median(profiled) if profiled else None,
        consumer_ms=consumer,
        wait_ms=mean(clock.wait_ms),
        cpu_ms=mean(clock.cpu_ms),
        runq_ms=mean(clock.runq_ms),
        epoch=epoch,
    )
