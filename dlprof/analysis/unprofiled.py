"""The training's real speed, without the profiler: from the manifest's step clock.

``dlprof record`` times every training step with cheap clocks, profiled or not. Steps after the
profiler window (the reference steps) are what the user's own training does; steps inside it are
slower by the profiler's per-operator cost. This module measures both, the profiler overhead, the
consumer's unprofiled time, and what an epoch boundary costs (workers restarting).

Medians throughout: one slow step (a long sequence, a garbage collection) must not move the answer.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from dlprof.manifest import EPOCH_SETTLE_STEPS, PHASE_AFTER, PHASE_PROFILED, LoaderConfig, Manifest
#: Fewer reference steps than this make the unprofiled median unreliable.
MIN_REFERENCE_STEPS = 5


@dataclass(frozen=True)
class EpochStats:
    """Epoch boundaries of the training loader."""

    steps_per_epoch: float | None  # batches per epoch / batches per step; None without a sampler length
    persistent_workers: bool
    num_workers: int
    #: Extra time an epoch boundary costs (median over boundaries measured after start-up); None if none was seen.
    restart_ms: float | None
    boundaries_measured: int
    first_batch_ms: float | None  # median time from iterator creation to the first batch
    end_ms: float | None  # median time of the __next__ that ended an epoch (workers shut down)


@dataclass(frozen=True)
class UnprofiledStats:
    """Unprofiled steps (after the window) against profiled ones, from the step clock (ms, medians)."""

    reference_steps: int
    step_ms: float
    profiled_steps: int
    profiled_step_ms: float | None
    consumer_ms: float  # step less data wait and waiting for a core
    wait_ms: float
    cpu_ms: float  # main process CPU time (all threads) per step
    runq_ms: float
    epoch: EpochStats | None

    @property
    def steps_per_s(self) -> float:
        return 1000 / self.step_ms

    @property
    def epoch_steps_per_s(self) -> float | None:
        """Steps/s over whole epochs: the steady step plus the measured restart per epoch.

        None when the epoch length is unknown, or when workers restart at every epoch but no
        boundary was timed after start-up.
        """
        epoch = self.epoch
        if epoch is None or epoch.steps_per_epoch is None:
            return None
        if epoch.num_workers and not epoch.persistent_workers:
            if epoch.restart_ms is None:
                return None
            restart = epoch.restart_ms
        else:
            restart = 0.0
        return 1000 * epoch.steps_per_epoch / (epoch.steps_per_epoch * self.step_ms + restart)

    @property
    def overhead_pct(self) -> float | None:
        """How much slower a profiled step was than an unprofiled one."""
        if self.profiled_step_ms is None:
            return None
        return 100 * (self.profiled_step_ms / self.step_ms - 1)


def _boundary_steps(epoch_start: tuple[bool, ...]) -> set[int]:
    """Steps inside the settling period of an epoch start."""
    near = set()
    for i, started in enumerate(epoch_start):
        if started:
            near.update(range(i, i + EPOCH_SETTLE_STEPS))
    return near


def _epoch_stats(manifest: Manifest, loader: LoaderConfig, batches_per_step: float, near: set[int]) -> EpochStats:
    clock = manifest.step_clock
    steady = {
        phase: statistics.median(w for i, (p, w) in enumerate(zip(clock.phase, clock.wall_ms)) if p == phase and i not in near)
        for phase in (PHASE_PROFILED, PHASE_AFTER)
        if any(p == phase and i not in near for i, p in enumerate(clock.phase))
    }
    restarts = []
    for i, started in enumerate(clock.epoch_start):
        phase = clock.phase[i]
        span = range(i, min(i + EPOCH_SETTLE_STEPS, len(clock)))
        # Only boundaries after start-up, whose settling steps all ran in one phase with a steady median.
        if not started or phase not in steady or any(clock.phase[j] != phase for j in span) or len(span) < EPOCH_SETTLE_STEPS:
            continue
        extra = sum(clock.wall_ms[j] - steady[phase] for j in span)
        if phase == PHASE_PROFILED and PHASE_AFTER in steady:
            extra *= steady[PHASE_AFTER] / steady[PHASE_PROFILED]  # the profiler slowed these steps too
        restarts.append(max(0.0, extra))
    # Restarts from after the window are unprofiled: prefer them.
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
    )


def unprofiled_stats(manifest: Manifest | None, batches_per_step: float) -> UnprofiledStats | None:
    """Unprofiled speed of a run recorded with reference steps; ``None`` when it has too few of them."""
    if manifest is None or not len(manifest.step_clock):
        return None
    clock = manifest.step_clock
    near = _boundary_steps(clock.epoch_start)
    after = [i for i, p in enumerate(clock.phase) if p == PHASE_AFTER and i not in near]
    if len(after) < MIN_REFERENCE_STEPS or statistics.median(clock.wall_ms[i] for i in after) <= 0:
        return None
    profiled = [clock.wall_ms[i] for i, p in enumerate(clock.phase) if p == PHASE_PROFILED and i not in near]
    median = lambda column: statistics.median(column[i] for i in after)  # noqa: E731
    consumer = statistics.median(max(0.0, clock.wall_ms[i] - clock.wait_ms[i] - clock.runq_ms[i]) for i in after)
    epoch = _epoch_stats(manifest, manifest.loader, batches_per_step, near) if manifest.loader is not None else None
    return UnprofiledStats(
        reference_steps=len(after), step_ms=median(clock.wall_ms), profiled_steps=len(profiled),
        profiled_step_ms=statistics.median(profiled) if profiled else None, consumer_ms=consumer, wait_ms=median(clock.wait_ms),
        cpu_ms=median(clock.cpu_ms), runq_ms=median(clock.runq_ms), epoch=epoch,
    )  # fmt: skip
