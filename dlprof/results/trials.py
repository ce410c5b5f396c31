"""What the in-process trials measured (dlprof.analysis.trials builds it): every tried DataLoader setting's speed,
measured inside the one running training, next to what the model predicted for it."""

from __future__ import annotations

from dataclasses import dataclass

from dlprof.core.manifest import TrialSegment
from dlprof.results.analysis import Throughput

#: How the trials ran: every setting in turn inside the one training process (``dlprof record --try-workers``).
MODE_IN_PROCESS = "in-process"
#: What a speed comparison rests on: steady steps inside an epoch, or whole epochs with their restarts.
BASIS_IN_EPOCH = "inside an epoch"
BASIS_WHOLE_EPOCHS = "over whole epochs"


def setting_label(num_workers: int, persistent_workers: bool | None) -> str:
    """How reports and notes name a setting: ``num_workers=2`` or ``num_workers=2 (persistent)``."""
    return f"num_workers={num_workers}" + (" (persistent)" if persistent_workers else "")


@dataclass(frozen=True, kw_only=True)
class TrialSetting:
    """One tried setting: its speed measured in the training process over every round, and its prediction."""

    num_workers: int
    persistent_workers: bool
    #: Steady steps inside an epoch, over all its segments (each segment's refill transient left out).
    speed: Throughput | None
    #: Steps/s over whole epochs (the steps of an epoch, then a restart), when the epoch length is known.
    epoch_steps_per_s: float | None
    #: What an epoch boundary costs at this setting, ms: creating its iterator to the first batch (workers forked
    #: or spawned), and shutting its workers down; with persistent workers, the wait for the first batch only.
    restart_ms: float | None
    segments: int
    #: The model's prediction (from the profiled window) on the basis the trials compare on, and its error against
    #: the measured speed, % ((predicted - measured) / measured).
    predicted_steps_per_s: float | None
    error_pct: float | None
    #: The prediction at the trials' pace (:class:`TrialsPace`: scaled so that the recorded setting's matches its own
    #: trials) and its error, % (None: no pace, or this is the setting that sets it, whose error would be 0 by
    #: construction).
    paced_steps_per_s: float | None = None
    paced_error_pct: float | None = None
    #: Share of its steady steps' time spent waiting for data, %; None when nothing was measured.
    data_wait_pct: float | None = None
    #: Its workers' memory together (PSS, MiB: each worker's peak, summed over the workers a switch to it started;
    #: the most over its segments); 0 without workers, None where the workers' memory was not sampled.
    workers_pss_mib: float | None = None
    #: Ruled out of the recommendation: its workers took more than ``--max-worker-memory``.
    over_memory_limit: bool = False

    @property
    def steps_per_s(self) -> float | None:
        return self.speed.steps_per_s if self.speed is not None else None


@dataclass(frozen=True, kw_only=True)
class TrialsPace:
    """The pace the trials ran at, which the predictions beside them are scaled to: the recorded setting's speed in
    its own trials against the model's prediction for it, anchored on the reference steps minutes before them.

    The trials interleave every setting in rounds, so a move of the training's (or the machine's) speed falls on all of
    them alike; the reference steps ran before, in one block, and a move between the two falls on every prediction.
    Scaled to the pace, the predictions' errors are the model's own.
    """

    num_workers: int
    persistent_workers: bool
    #: The recorded setting's speed in its trials, and the model's prediction for it, steps/s on the trials' basis.
    measured_steps_per_s: float
    predicted_steps_per_s: float
    #: Whether that prediction rests on the run's reference steps (else on the profiled window alone).
    from_reference_steps: bool

    @property
    def factor(self) -> float:
        """What every prediction is multiplied by to be at the trials' pace."""
        return self.measured_steps_per_s / self.predicted_steps_per_s

    @property
    def moved_pct(self) -> float:
        """How far the prediction at the recorded setting was from its trials, % ((predicted - measured) / measured):
        the training's move between the reference steps and the trials, where the prediction rests on them."""
        return 100 * (self.predicted_steps_per_s - self.measured_steps_per_s) / self.measured_steps_per_s


@dataclass(frozen=True)
class MeasuredSegment:
    """One segment of the trials as recorded, and its own speed (its steady steps; None: none were steady), of which
    its setting's speed is combined."""

    segment: TrialSegment
    speed: Throughput | None
    #: Its workers' memory together (PSS, MiB: each worker's peak, over the workers its switch started); 0 without
    #: workers, None where one of them was not sampled (or the padding segment, which started none).
    workers_pss_mib: float | None = None


@dataclass(frozen=True, kw_only=True)
class PaddingTrial:
    """The padding segment: the training at one tried setting with its batches trimmed to their longest real sequence
    (only positions the loss ignores dropped), against that setting as padded, both steady steps inside an epoch."""

    num_workers: int
    persistent_workers: bool
    #: The share of the positions of the checked batches that trimming drops, %.
    trimmed_pct: float | None
    trimmed: Throughput | None
    padded_steps_per_s: float | None
    #: How much faster trimmed than padded, % (None: either was not measured).
    gain_pct: float | None
    #: Whether both speeds are trustworthy (enough steps and seconds, the padded one's spread within bounds).
    trusted: bool


@dataclass(frozen=True, kw_only=True)
class TuningCost:
    """What the trials cost the training, against what the setting chosen from them saves."""

    #: The trials' steps and their time (s), and what those steps take at the run's own setting (None: unknown).
    steps: int
    seconds: float
    own_seconds: float | None
    #: The chosen ``num_workers``, its speed and the run's own setting's (steps/s, on the trials' basis), and the
    #: seconds the chosen setting saves per 1,000 steps (negative: it is slower; None: unknown).
    num_workers: int
    chosen_steps_per_s: float
    own_steps_per_s: float | None
    saved_s_per_1000: float | None
    #: The steps after which the chosen setting has made up what the trials took beyond the run's own setting (None:
    #: they took nothing extra, or the chosen setting saves nothing).
    payback_steps: float | None
    #: With ``--then best|keep`` once the training ended: the steps run after the switch (``TunedRun.steps_at_setting``)
    #: and the seconds the setting switched to saved over them against the run's own setting, both speeds steady steps
    #: inside an epoch (negative: it lost; None: not measured, or the training went on at its own setting).
    tuned_steps: int | None = None
    tuned_saved_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class FaultLevels:
    """The main process's minor page faults and kernel CPU ms per steady step after the switch and in the trial of
    the same setting (the step clock's ``faults``, ``sys_ms``): glibc malloc's level, which can move inside one
    process and move a CPU training's speed with it, whatever its DataLoader setting."""

    faults_per_step: float
    sys_ms: float
    trial_faults_per_step: float
    trial_sys_ms: float
    #: The level moved between the two: by at least ``analysis.tuned.LEVEL_MOVED_PCT`` of the trial's kernel time,
    #: with at least ``analysis.unprofiled.VOLATILE_FAULTS`` faults a step in either.
    moved: bool


@dataclass(frozen=True, kw_only=True)
class CpuLevels:
    """The main process's CPU ms per steady step (all its threads; at the run's mean batch where the speeds are
    scaled to it) and the cores it kept busy (CPU time over wall time), after the switch and in the trial of the same
    setting: the same work at the same setting, so CPU time per step that moved while as many cores stayed busy is
    the training's own speed moving, not the setting's. On a CPU training whose intra-op threads fill the cores, that
    speed wanders by itself while a fixed unit of work in another process does not
    (docs/validation.md#why-a-cpu-trainings-speed-wanders)."""

    cpu_ms: float
    trial_cpu_ms: float
    cores: float
    trial_cores: float
    #: CPU time per step apart by at least ``analysis.tuned.CPU_MOVED_PCT`` with the cores kept busy within
    #: ``analysis.tuned.CORES_SAME_PCT`` of each other.
    cpu_per_step_moved: bool


@dataclass(frozen=True, kw_only=True)
class TunedRun:
    """The training after its trials (``--then best|keep``): the setting it went on at, and whether that setting's
    speed held beside its trial's measurement (both steady steps on the trials' in-epoch basis)."""

    #: ``best`` or ``keep`` (``manifest.Then.mode``).
    mode: str
    #: The setting switched to, and the first step at it (None: no switch; ``error`` says why).
    num_workers: int | None
    persistent_workers: bool | None
    first_step: int | None
    #: Steps after the trials: all of them, and those at the chosen setting (its refill transient included).
    steps: int
    steps_at_setting: int
    #: The chosen setting's speed over the rest of the training (None: too few steps to measure, or still training).
    speed: Throughput | None
    #: The same setting's speed in its trial (None: it was not tried, e.g. ``keep`` of an untried count).
    trial_steps_per_s: float | None
    #: (rest of the training - trial) / trial, % (None: either unknown), and whether that is within
    #: ``analysis.tuned.HELD_PCT`` below the trial with both speeds trusted (None: not known).
    change_pct: float | None
    held: bool | None
    #: Why there was no switch, or why the check could not be made.
    error: str | None = None
    #: Page faults and kernel time after the switch beside the trial's (None: not measured, or older recordings).
    fault_levels: FaultLevels | None = None
    #: Where the setting itself was not tried, the ``persistent_workers`` of the trial of the same count it is held
    #: against (inside an epoch persistent workers change nothing); None: its own trial, or none.
    trial_persistent_workers: bool | None = None
    #: The main process's CPU time per step and cores busy after the switch and in its trial (None: not measured).
    cpu_levels: CpuLevels | None = None

    @property
    def steps_per_s(self) -> float | None:
        return self.speed.steps_per_s if self.speed is not None else None


@dataclass(frozen=True, kw_only=True)
class WidthScaling:
    """Batches of varying width (padded to their longest sequence) whose steps' times follow them: every trial speed,
    and the speed after the switch, scaled to the run's mean batch (:mod:`dlprof.analysis.batch_widths`)."""

    #: Token positions (rows x width) of the run's mean batch.
    mean_positions: float
    #: What a token position adds to a step's time (the slope fitted within the pieces), ms.
    ms_per_position: float
    #: The correlation of steps' times with their batches' positions within the pieces, and the steps fitted.
    correlation: float
    steps: int
    #: 1 where a step computes on the batch taken in the step before (a loader read one batch ahead, as
    #: accelerate's is), else 0.
    lag_steps: int
    #: The range of the scaling's changes to the trials' speeds, %.
    low_pct: float = 0.0
    high_pct: float = 0.0


@dataclass(frozen=True, kw_only=True)
class TrialsResult:
    """The trials of one run, and the basis they compare on."""

    #: Rounds that ran to their end, and those asked for.
    rounds: int
    rounds_planned: int
    #: :data:`BASIS_IN_EPOCH` or :data:`BASIS_WHOLE_EPOCHS`: which speed is compared and recommended on.
    basis: str
    #: Every setting tried, one entry per (num_workers, persistent_workers).
    settings: tuple[TrialSetting, ...]
    #: Notes for the report: trials cut short, spreads too wide to trust, settings that could not be tried.
    notes: tuple[str, ...] = ()
    mode: str = MODE_IN_PROCESS
    #: Every segment that ran, in the order the manifest lists them.
    segments: tuple[MeasuredSegment, ...] = ()
    #: The padding segment's measurement (None: none ran), or why none was planned (None: the batches were not
    #: checked, or it ran).
    padding: PaddingTrial | None = None
    padding_not_measured: str | None = None
    #: ``--max-worker-memory`` (MiB, None: no limit): settings whose workers take more are not recommended.
    max_worker_memory_mib: float | None = None
    #: What tuning cost against what it saves (set by the advice once it has chosen; None: nothing chosen).
    cost: TuningCost | None = None
    #: The training after the trials (``--then best|keep``; None: ``--then stop``).
    tuned: TunedRun | None = None
    #: The speeds scaled to the run's mean batch width (None: the widths did not vary, or did not move the steps).
    width_scaling: WidthScaling | None = None
    #: The pace the predictions beside the trials are scaled to (None: the recorded setting was not measured or not
    #: predicted, or no predictions were set).
    pace: TrialsPace | None = None

    def measured(self, setting: TrialSetting) -> float | None:
        """``setting``'s measured speed on this result's basis."""
        return setting.epoch_steps_per_s if self.basis == BASIS_WHOLE_EPOCHS else setting.steps_per_s
