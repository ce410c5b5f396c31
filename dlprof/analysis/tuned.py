"""The training after its trials (``dlprof record --try-workers ... --then best|keep``): whether the setting it went on
at held its trial's speed.

After the trials' last segment the training goes on (step phase ``tuned``) at that segment's setting until the chosen
setting is switched to (``Then.first_step``), then at it to its own end. The steps from the switch on are measured as
a trial's segment is (:mod:`dlprof.analysis.segments`): cut at every epoch start, each piece's refill transient left
out (right after the switch, the queue of the setting switched from too: its batches in flight are kept and served
first), steady steps over their time, so the speed after the switch sits on the trials' in-epoch basis beside the
trial's measurement of the same setting.

It held when both speeds are trusted (:mod:`dlprof.core.throughput`'s rules: enough steps and seconds, the spread
within bounds) and the speed after the switch is at most :data:`HELD_PCT` below the trial's.

Beside the two speeds, the main process's page faults and kernel time per steady step in each
(:class:`~dlprof.results.trials.FaultLevels`): on CPU, glibc malloc's level can move inside one process (the
Trainer's rest of the training alternated between about 6,700 and 8,200 faults a step, 10.1 and 9.0 steps/s, at one
setting), and the report says so where it moved. Torch-free.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from dlprof.analysis.batch_widths import Scaler
from dlprof.analysis.segments import Piece, segment_pieces, steady_speed, steady_steps, switched_loader
from dlprof.analysis.unprofiled import VOLATILE_FAULTS
from dlprof.core import throughput
from dlprof.core.manifest import LoaderConfig, Manifest, StepClock, Then, TrialSegment
from dlprof.core.schema import STATUS_TRAINING
from dlprof.results.analysis import Throughput
from dlprof.results.trials import CpuLevels, FaultLevels, TrialSetting, TunedRun

#: The speed after the switch held when it is at most this much (%) below the same setting's trial: more than two
#: trusted measurements of one setting differ by (throughput.MAX_SPREAD_PCT bounds each one's spread).
HELD_PCT = 5.0

#: Kernel time per step after the switch this much (%) above or below the trial's: malloc's level moved.
LEVEL_MOVED_PCT = 10.0

#: CPU time per step after the switch this much (%) above or below the trial's, with the cores kept busy within
#: CORES_SAME_PCT of each other: the same work took the training more or less CPU time (on this project's 2-core VM,
#: 52-74 ms a step for one workload at one setting within one process, tracking its speed, while a fixed unit of work
#: in another process held steady).
CPU_MOVED_PCT = 10.0
CORES_SAME_PCT = 5.0

#: Why a run still training has no speed after the switch.
STILL_TRAINING = "the training goes on; the rest is measured when it ends"


def tuned_run(
    manifest: Manifest,
    settings: Sequence[TrialSetting],
    batches_per_step: float,
    trial_steps: Mapping[tuple[int, bool], Sequence[int]] | None = None,
    scaler: Scaler | None = None,
) -> TunedRun | None:
    """What the training did after its trials and whether the chosen setting's speed held beside its trial's; None
    for a run without ``--then best|keep`` (``Trials.then``).

    Args:
        settings: the trials' tried settings, measured (``TrialsResult.settings``): the trial of the setting gone on at.
        batches_per_step: the run's batches per training step (the refill transient's queue, in steps).
        trial_steps: each tried setting's steady steps in the step clock (its page faults against those after the
            switch); None: not compared.
        scaler: what scaled the trials' speeds to the run's mean batch: the speed after the switch is scaled alike.
    """
    trials = manifest.trials
    then = trials.then if trials is not None else None
    if trials is None or then is None:
        return None
    clock = manifest.step_clock
    config = switched_loader(manifest)
    persistent = _persistent_after(then, config)
    trial = _trial_of(settings, then.num_workers, persistent)
    trial_rate = trial.steps_per_s if trial is not None else None
    other = trial.persistent_workers if trial is not None and trial.persistent_workers != persistent else None
    switched = then.first_step is not None and then.num_workers is not None
    first = then.first_step if then.first_step is not None else len(clock)
    run = TunedRun(
        mode=then.mode,
        num_workers=then.num_workers,
        persistent_workers=persistent if then.num_workers is not None else then.persistent_workers,
        first_step=then.first_step,
        steps=max(0, len(clock) - then.trials_end_step),
        steps_at_setting=max(0, len(clock) - first) if switched else 0,
        speed=None,
        trial_steps_per_s=trial_rate,
        change_pct=None,
        held=None,
        trial_persistent_workers=other,
    )
    if not switched:
        return replace(run, error=_no_switch(then, manifest.status, run.steps))
    if manifest.status == STATUS_TRAINING:
        return replace(run, error=STILL_TRAINING)
    pieces = switch_pieces(manifest, batches_per_step)
    speed = steady_speed(clock, pieces, batches_per_step, then.num_workers or 0, scaler) if pieces else None
    if speed is None or not throughput.enough(speed.steps, speed.seconds):
        return replace(run, error=_too_few(speed))
    change = 100 * (speed.steps_per_s - trial_rate) / trial_rate if trial_rate else None
    error = _not_comparable(speed, trial)
    held = None if error is not None or change is None else change >= -HELD_PCT
    assert then.num_workers is not None  # switched
    tried = (then.num_workers, trial.persistent_workers if trial is not None else persistent)
    after, in_trial = steady_steps(pieces), (trial_steps or {}).get(tried, ())
    levels = _fault_levels(clock, after, in_trial)
    cpu = _cpu_levels(clock, (after, speed), (in_trial, trial.speed if trial is not None else None))
    return replace(run, speed=speed, change_pct=change, held=held, error=error, fault_levels=levels, cpu_levels=cpu)


def _persistent_after(then: Then, config: LoaderConfig | None) -> bool:
    """The ``persistent_workers`` the training went on with: the switch's, else the switched loader's own."""
    if then.persistent_workers is not None:
        return then.persistent_workers
    return bool(config and config.persistent_workers)


def _trial_of(settings: Sequence[TrialSetting], num_workers: int | None, persistent: bool) -> TrialSetting | None:
    """The trial the setting gone on at is held against: its own, else (``--then best`` may advise
    ``persistent_workers`` the trials did not try) the trial of the same count with the other ``persistent_workers``,
    which inside an epoch, where both speeds are measured, runs the same loader; None: the count was not tried."""
    same_count = [s for s in settings if s.num_workers == num_workers]
    own = next((s for s in same_count if s.persistent_workers == persistent), None)
    return own if own is not None else next(iter(same_count), None)


def _cpu_levels(
    clock: StepClock, after: tuple[Sequence[int], Throughput], trial: tuple[Sequence[int], Throughput | None]
) -> CpuLevels | None:
    """The main process's CPU ms per steady step and the cores it kept busy after the switch and in its trial, each
    at the run's mean batch where its speed was scaled to it; None where either has no steady steps."""
    measured = []
    for steps, speed in (after, trial):
        wall_ms = sum(clock.wall_ms[i] for i in steps)
        if not steps or speed is None or wall_ms <= 0:
            return None
        cpu_ms = sum(clock.cpu_ms[i] for i in steps)
        # A step of the mean batch took (1 + scaled %) times less wall time than these, and as much less CPU time.
        measured.append((cpu_ms / len(steps) / (1 + (speed.width_scaled_pct or 0.0) / 100), cpu_ms / wall_ms))
    (cpu_ms, cores), (trial_cpu_ms, trial_cores) = measured
    moved = (
        trial_cpu_ms > 0
        and abs(cpu_ms / trial_cpu_ms - 1) >= CPU_MOVED_PCT / 100
        and trial_cores > 0
        and abs(cores / trial_cores - 1) <= CORES_SAME_PCT / 100
    )
    return CpuLevels(
        cpu_ms=cpu_ms, trial_cpu_ms=trial_cpu_ms, cores=cores, trial_cores=trial_cores, cpu_per_step_moved=moved
    )


def _fault_levels(clock: StepClock, after: Sequence[int], trial: Sequence[int]) -> FaultLevels | None:
    """Page faults and kernel ms per step over the steady steps ``after`` the switch and those of the ``trial``; None
    where either has none or the step clock did not keep them (recorded before dlprof 0.7)."""
    if not after or not trial or not clock.faults or not clock.sys_ms:
        return None
    faults, trial_faults = (statistics.fmean(clock.faults[i] for i in steps) for steps in (after, trial))
    sys_ms, trial_sys_ms = (statistics.fmean(clock.sys_ms[i] for i in steps) for steps in (after, trial))
    change_ms = abs(sys_ms - trial_sys_ms)
    moved = max(faults, trial_faults) >= VOLATILE_FAULTS and 0 < change_ms >= LEVEL_MOVED_PCT / 100 * trial_sys_ms
    return FaultLevels(
        faults_per_step=faults,
        sys_ms=sys_ms,
        trial_faults_per_step=trial_faults,
        trial_sys_ms=trial_sys_ms,
        moved=moved,
    )


def switch_pieces(manifest: Manifest, batches_per_step: float) -> list[Piece]:
    """The pieces of the steps from the switch to the end, cut as a trial's segment is; none where the training did
    not switch."""
    trials = manifest.trials
    then = trials.then if trials is not None else None
    if trials is None or then is None or then.first_step is None or then.num_workers is None:
        return []
    clock = manifest.step_clock
    config = switched_loader(manifest)
    persistent = _persistent_after(then, config)
    own_prefetch = config.prefetch_factor if config else None
    prefetch = then.prefetch_factor or own_prefetch
    # Until the switch the training ran at the trials' last segment's setting: its batches in flight are served first.
    segments = trials.segments
    before = max(segments, key=lambda s: s.first_step).num_workers if segments else None
    queue = throughput.queue_steps(then.num_workers, prefetch, batches_per_step)
    first_queue = max(queue, throughput.queue_steps(before, own_prefetch, batches_per_step))
    # The stretch after the switch is measured as a segment: the round is not read.
    stretch = TrialSegment(
        num_workers=then.num_workers,
        persistent_workers=persistent,
        round=0,
        first_step=then.first_step,
        steps=len(clock) - then.first_step,
    )
    busy_at = throughput.all_busy_below(then.num_workers, prefetch)
    return segment_pieces(clock, stretch, (first_queue, queue), busy_at)


def _no_switch(then: Then, status: str | None, steps_after: int) -> str:
    if then.error is not None:
        return f"no switch: {then.error}"
    if status == STATUS_TRAINING:
        return f"{STILL_TRAINING} (no switch yet)"
    if steps_after == 0:  # what a killed training wrote when its trials ended stands in
        return (
            "no step after the trials was recorded: this is the recording written when the trials ended (the one the"
            " training's end would have written was not: it was killed, or that write failed)"
        )
    return "no switch: the training went on at the trials' last setting"


def _too_few(speed: Throughput | None) -> str:
    if speed is None:
        return "no steady steps after the switch (every step was refill transient)"
    return (
        f"{speed.steps} steady steps in {speed.seconds:.2f} s after the switch: too few to measure (at least"
        f" {throughput.MIN_STEPS} steps and {throughput.MIN_SECONDS:g} s)"
    )


def _not_comparable(speed: Throughput, trial: TrialSetting | None) -> str | None:
    """Why the speed after the switch cannot be held against its trial's; None when it can."""
    if trial is None or trial.speed is None:
        return "no trial of this count measured it: nothing to compare with"
    if not speed.trusted:
        return (
            f"its rate after the switch varied {speed.spread_pct:.0f} % (more than {throughput.MAX_SPREAD_PCT:g} %):"
            " too wide to trust"
        )
    if not trial.speed.trusted:
        return "its trial's measurement is not to be trusted (the trials' notes say why)"
    return None
