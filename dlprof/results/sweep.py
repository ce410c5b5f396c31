"""What ``dlprof sweep`` found (dlprof.workflows.sweep builds it): each swept num_workers measured against the
first run's predictions, and whether its recommendation held."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlprof.core.version import SWEEP_SCHEMA, __version__
from dlprof.results.advice import Headline
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS  # a sweep compares on the trials' bases

SCHEMA = SWEEP_SCHEMA
#: How the counts were measured (SweepResult.mode): in-process trials in one launch
#: (:data:`~dlprof.results.trials.MODE_IN_PROCESS`, the default), or one launch per count (``--launches``).
MODE_LAUNCHES = "launches"


# Why the first run's recommendation held or not (SweepResult.outcome); WITHIN_BEST and CHOOSE_WITHIN are
# dlprof.advice.rules's.
#: Measured within WITHIN_BEST of the best, and no fewer workers came within CHOOSE_WITHIN of it.
OUTCOME_HELD = "held"
#: Measured more than WITHIN_BEST below the best.
OUTCOME_SLOWER = "slower"
#: Within WITHIN_BEST of the best, but fewer workers came within CHOOSE_WITHIN of it.
OUTCOME_MORE_WORKERS = "more_workers"
#: The recommended count is not among the swept counts.
OUTCOME_NOT_MEASURED = "not_measured"
#: The first run made no num_workers recommendation (nothing to check).
OUTCOME_NO_RECOMMENDATION = "no_recommendation"


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """One swept count: what it measured, and what the first run predicted for it."""

    num_workers: int
    #: Where it was recorded: its own run (``--launches``), or the one run whose trials measured every count.
    run_dir: Path
    trace_file: Path
    #: Measured steps per second: unprofiled (steady reference steps or trial segments, or whole epochs) when
    #: ``unprofiled``, else profiled steps.
    steps_per_s: float
    unprofiled: bool
    #: Measured and predicted over whole epochs (worker restarts included), else inside an epoch: the sweep's basis,
    #: the same for every run.
    over_epochs: bool
    #: Share of a step spent waiting for data, % (unprofiled when known, else the profiled breakdown's).
    data_wait_pct: float
    #: Sum of the DataLoader workers' last PSS, MiB (0 with no workers); None when unknown.
    worker_pss_mib: float | None
    #: The first run's steady-state prediction for this count; None when it predicted nothing for it.
    predicted_steps_per_s: float | None
    #: (predicted - measured) / measured, %; None without a prediction.
    error_pct: float | None
    #: num_workers the DataLoader really got, from the manifest (None if unknown).
    num_workers_recorded: int | None
    #: How much slower the profiled steps were than unprofiled ones, % (None if unknown).
    profiler_overhead_pct: float | None
    #: The measured speed's spread (range over its sub-windows, or over the whole epochs), % of it; None when
    #: unknown (profiled steps, or whole epochs estimated from the steady speed and the restart).
    spread_pct: float | None = None
    #: Why the measured speed is not to be trusted (too few steady steps or seconds, too wide a spread); None when
    #: it is, or when that is unknown.
    distrust: str | None = None
    #: In-process: the prediction at the trials' pace (:class:`~dlprof.results.trials.TrialsPace`) and its error, %
    #: (None: no pace; the error also for the count that sets it, whose paced prediction is its measurement).
    paced_steps_per_s: float | None = None
    paced_error_pct: float | None = None
    sets_pace: bool = False

    @property
    def shown_steps_per_s(self) -> float | None:
        """The prediction the report shows: at the trials' pace where there is one."""
        return self.paced_steps_per_s if self.paced_steps_per_s is not None else self.predicted_steps_per_s

    @property
    def shown_error_pct(self) -> float | None:
        """The error of :attr:`shown_steps_per_s` (None for the count that sets the pace)."""
        return self.paced_error_pct if self.paced_steps_per_s is not None else self.error_pct


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """A whole sweep: its points in the order recorded, the best measured, and whether the advice held."""

    name: str
    sweep_dir: Path
    points: tuple[SweepPoint, ...]
    #: The count whose run made the advice and the predictions (the first swept).
    from_run: int
    #: Its recommended num_workers (None: it made no recommendation).
    recommended: int | None
    best_num_workers: int
    best_steps_per_s: float
    #: The fewest workers measured within ``fewest_within_pct`` of the best (what the recommendation should have been),
    #: and how close to the best a recommendation must come to hold, %.
    fewest_near_best: int
    within_best_pct: float
    fewest_within_pct: float
    #: True, False, or None when it cannot be told (see ``outcome``).
    held: bool | None
    outcome: str
    #: The recommended count's measured steps/s, and how far below the best, % (None when not measured).
    recommended_steps_per_s: float | None
    recommended_below_best_pct: float | None
    #: TensorBoard scalars (None when they could not be written).
    scalars_dir: Path | None
    schema: str = SCHEMA
    #: The dlprof that made it, stamped beside the schema in every document written.
    dlprof_version: str = __version__
    #: The sweep's first line: its first count against the fewest workers measured within CHOOSE_WITHIN of the best
    #: (None: not made, e.g. a result built by hand).
    headline: Headline | None = None
    #: :data:`~dlprof.results.trials.MODE_IN_PROCESS` (one launch, every count tried in the running training) or
    #: :data:`MODE_LAUNCHES`.
    mode: str = MODE_LAUNCHES
    #: In-process: the rounds of trials that ran to their end, and those planned (None for launches).
    rounds: int | None = None
    rounds_planned: int | None = None
    #: What the trials noted (cut short, spreads too wide, restarts estimated); empty for launches.
    notes: tuple[str, ...] = ()

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(r.num_workers for r in self.points)

    @property
    def basis(self) -> str:
        """What every run's measured and predicted speed is (the same for all): :data:`BASIS_WHOLE_EPOCHS` or
        :data:`BASIS_IN_EPOCH`."""
        return BASIS_WHOLE_EPOCHS if self.points and self.points[0].over_epochs else BASIS_IN_EPOCH
