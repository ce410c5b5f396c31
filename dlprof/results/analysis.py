"""What the analysis of one trace found (dlprof.analysis builds these): the step breakdown, the loader's costs,
the GPU's activity, the unprofiled speed, and a job's ranks side by side. Times in ms unless the name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Mean, median and 90th percentile of a per-step (or per-batch) quantity, in ms."""

    mean_ms: float
    p50_ms: float
    p90_ms: float


CATEGORIES = ("data_wait", "h2d", "forward", "backward", "optimizer", "other")


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """One ProfilerStep, split into :data:`CATEGORIES` (ms)."""

    number: int
    start_us: float
    step_ms: float
    data_wait_ms: float
    h2d_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    other_ms: float

    def category_ms(self, category: str) -> float:
        return getattr(self, f"{category}_ms")


@dataclass(frozen=True)
class StepBreakdown:
    """The per-step breakdown and its summaries over the steps."""

    steps: list[StepTime]
    step: Summary
    categories: dict[str, Summary]

    @property
    def data_wait_pct(self) -> float:
        """Mean time waiting for data as a share of the mean step."""
        return 100 * self.categories["data_wait"].mean_ms / self.step.mean_ms if self.step.mean_ms else 0.0

    @property
    def consumer_ms(self) -> float:
        """Mean step time without data wait: what a step would take if batches were always ready."""
        return self.step.mean_ms - self.categories["data_wait"].mean_ms


@dataclass(frozen=True, kw_only=True)
class BatchCost:
    """One batch as its producer saw it (ms)."""

    batch: tuple[int, int, int]
    worker: int
    pid: int
    end_us: float
    wall_ms: float
    cpu_ms: float
    runq_ms: float
    fetch_ms: float
    fetch_cpu_ms: float
    tokenize_ms: float
    tokenize_cpu_ms: float
    collate_ms: float
    collate_cpu_ms: float
    tensors: int


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """One worker process (or the main process, worker -1)."""

    worker: int
    pid: int
    batches: int
    batch_ms_mean: float
    cpu_ms_mean: float
    #: Batches per second this worker can produce when it never waits for a free slot (None: its batches took no
    #: measurable time).
    capacity_per_s: float | None
    pss_mib_last: float | None
    pss_growth_mib_per_min: float | None


@dataclass(frozen=True)
class WaitStats:
    """The main process's waits in ``__next__``, by whether the batch was already produced."""

    waits: int
    not_ready_ms_mean: float  # per step: waiting while the batch was still being produced
    ready_ms_mean: float  # per step: the batch was produced before the wait began (hand-off cost)


@dataclass(frozen=True, kw_only=True)
class LoaderStats:
    """Loader costs of one run; ``None`` fields are unknown (no spans of that kind)."""

    batches: list[BatchCost]
    batch: Summary
    batch_cpu_ms_mean: float
    #: Per batch, time runnable but waiting for a core: the cores were oversubscribed.
    batch_runq_ms_mean: float
    fetch: Summary
    fetch_cpu_ms_mean: float
    tokenize: Summary
    tokenize_cpu_ms_mean: float
    collate: Summary
    collate_cpu_ms_mean: float
    tensors_per_batch: float
    cpu_fraction: float
    bound: str  # "cpu" | "io" | "mixed"
    in_main_process: bool
    workers: list[WorkerStats]
    wait: WaitStats | None

    @property
    def workers_observed(self) -> int:
        return sum(1 for w in self.workers if w.worker >= 0)


@dataclass(frozen=True, kw_only=True)
class GpuStep:
    """One ProfilerStep on the GPU: busy, idle and why, host-to-device copies (ms)."""

    number: int
    busy_ms: float
    idle_ms: float
    idle_data_ms: float
    idle_launch_ms: float
    idle_other_ms: float
    h2d_ms: float


@dataclass(frozen=True, kw_only=True)
class GpuStats:
    """GPU activity of a CUDA/ROCm trace; ``None`` is returned for CPU-only traces instead."""

    steps: list[GpuStep]
    busy: Summary
    idle: Summary
    idle_data: Summary
    idle_launch: Summary
    idle_other: Summary
    h2d: Summary
    busy_pct: float
    h2d_copies: int
    h2d_pageable_copies: int
    h2d_pinned_copies: int
    h2d_mib_per_step: float


@dataclass(frozen=True, kw_only=True)
class Throughput:
    """A measured speed: steady-state steps over the time they took (:mod:`dlprof.core.throughput`)."""

    steps_per_s: float
    #: Steps timed (the steady ones), and the time they took.
    steps: int
    seconds: float
    #: The range of the rates of the parts it was measured in (sub-windows, or segments of trials), % of the
    #: overall rate: how far one part strays from another.
    spread_pct: float
    #: Steps left out as the refill transient after pauses (the export, a switch, an epoch start).
    transient_steps: int = 0
    #: The spread is narrow enough, and enough steps and seconds were timed, to trust the number.
    trusted: bool = True
    #: Of the steps timed, how many a surplus made before them carried (batches, in steps): the queue of made batches
    #: shrank by that much over them. The rate leaves them out: ``(steps - surplus_steps) / seconds``.
    surplus_steps: float = 0.0
    #: How much the rate moved when scaled to the run's mean batch width (its steps' batches were narrower or wider),
    #: %; None: not scaled (:class:`~dlprof.results.trials.WidthScaling`).
    width_scaled_pct: float | None = None


@dataclass(frozen=True, kw_only=True)
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
    #: Steps/s over the whole epochs timed after the window, their boundaries included; None if none was.
    whole_epoch_steps_per_s: float | None = None
    #: A run without workers: what forking once cost the following steps (copy-on-write), as workers would.
    fork_probe_ms: float | None = None
    #: The whole epochs timed after the window: all their steps over all their time, the spread the range of the
    #: epochs' own rates (0 when one epoch was timed: no spread is known); None if none was.
    whole_epoch_speed: Throughput | None = None


@dataclass(frozen=True, kw_only=True)
class PageFaults:
    """The main process's minor page faults and kernel CPU time per step: over the steady reference steps (means), and
    the level the unprofiled steps before the window each kept (the least of each; the first step left out) where
    at least a few were timed: a training's start-up takes one-off faults in some of them (thousands a step, then
    none), which no later step repeats."""

    faults_per_step: float
    sys_ms: float  # kernel CPU time per step
    sys_pct: float  # of the mean steady step
    before_faults_per_step: float | None = None  # the least over the steps before the window
    before_sys_ms: float | None = None  # the least over the steps before the window
    #: The unprofiled steps before the window counted above (0: too few), and their mean step less data wait and
    #: waiting for a core: against ``UnprofiledStats.consumer_ms``, what the window's after-effect changed.
    before_steps: int = 0
    before_consumer_ms: float | None = None
    #: So much of the step goes to page faults that the speed rests on the level glibc's malloc settled on in this
    #: process, which differs from launch to launch (and may drop after a profiler window).
    volatile: bool = False

    @property
    def window_saved_ms(self) -> float | None:
        """Kernel time per step the reference steps spent less than the steps before the window (a profiler window's
        freed buffers can lower malloc's page faults for the rest of the process); None where no steps before it were
        timed."""
        return None if self.before_sys_ms is None else max(0.0, self.before_sys_ms - self.sys_ms)


@dataclass(frozen=True, kw_only=True)
class PlainLaunchStats:
    """The recording's reference steps against a launch of the same command without the profiler over the same steps
    (``dlprof record --plain-launch``): what recording changed in them."""

    #: The steady reference steps both timed, and the speed each took them at (the recording's is the report's
    #: unprofiled speed; the plain launch's is it times the ratio of their times over those steps).
    steps: int
    recorded_steps_per_s: float
    plain_steps_per_s: float
    #: Over the whole epochs the recording timed after its window, where the launch timed them too.
    epoch_steps: int | None = None
    recorded_epoch_steps_per_s: float | None = None
    plain_epoch_steps_per_s: float | None = None

    @property
    def after_effect_pct(self) -> float:
        """How much faster (+) or slower (-) the recording ran its reference steps than the plain launch, %."""
        return 100 * (self.recorded_steps_per_s / self.plain_steps_per_s - 1)

    @property
    def epoch_after_effect_pct(self) -> float | None:
        """The same over whole epochs; None where none were compared."""
        if self.recorded_epoch_steps_per_s is None or not self.plain_epoch_steps_per_s:
            return None
        return 100 * (self.recorded_epoch_steps_per_s / self.plain_epoch_steps_per_s - 1)


@dataclass(frozen=True, kw_only=True)
class UnprofiledStats:
    """Unprofiled steps (after the window) against profiled ones, from the step clock (ms; means over the steady
    reference steps, but the ``_p50`` fields)."""

    #: The steady reference steps the speed is measured on (each pause's refill transient left out).
    reference_steps: int
    #: Their mean step: their time over their number (1000 / ``steps_per_s``).
    step_ms: float
    profiled_steps: int
    step_ms_p50: float
    profiled_step_ms: float | None  # median
    consumer_ms: float  # step less data wait and waiting for a core
    wait_ms: float
    cpu_ms: float  # main process CPU time (all threads) per step
    runq_ms: float
    epoch: EpochStats | None
    #: The speed as measured (:mod:`dlprof.core.throughput`): steps, seconds, the steps left out, the spread and whether
    #: it can be trusted; None for results built without it.
    speed: Throughput | None = None
    #: Why the speed is not to be trusted (too few steady steps or seconds, too wide a spread); None when it is.
    distrust: str | None = None
    #: The main process's page faults over the same steps; None in recordings made before they were kept.
    page_faults: PageFaults | None = None
    #: The same steps in a launch without the profiler (``dlprof record --plain-launch``); None without one.
    plain_launch: PlainLaunchStats | None = None

    @property
    def steps_per_s(self) -> float:
        """Steady steps over the time they took."""
        return self.speed.steps_per_s if self.speed is not None else 1000 / self.step_ms

    @property
    def epoch_steps_per_s(self) -> float | None:
        """Steps/s over whole epochs: the whole epochs as timed, else the steady step plus the measured restart.

        None when the epoch length is unknown, or when workers restart at every epoch but no
        boundary was timed after start-up.
        """
        epoch = self.epoch
        if epoch is not None and epoch.whole_epoch_steps_per_s is not None:
            return epoch.whole_epoch_steps_per_s
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
        """How much slower a profiled step was than an unprofiled one (medians: a ratio of typical steps, not a
        throughput)."""
        if self.profiled_step_ms is None:
            return None
        return 100 * (self.profiled_step_ms / self.step_ms_p50 - 1)


@dataclass(frozen=True, kw_only=True)
class RankStats:
    """One rank's profiled steps (ms per step, means over its recorded steps)."""

    rank: int
    trace_file: str
    steps: int
    step_ms: float
    data_wait_ms: float
    data_wait_pct: float
    #: The training thread inside collectives (communicating, and waiting for the other ranks).
    collective_ms: float
    #: The step without its collectives: the rank's own work (loading included).
    own_ms: float
    #: Wall time to produce a batch in the rank's loader processes (None without dlprof's spans).
    loader_batch_ms: float | None
    #: Its DataLoader workers' memory, summed (PSS, last reading); None when unknown or no workers.
    worker_pss_mib: float | None
    num_workers: int | None
    #: The unprofiled step (reference steps), when recorded.
    unprofiled_step_ms: float | None
    #: The collectives this rank ran (``all_reduce``, ...), most time first.
    collective_kinds: tuple[str, ...] = ()
    #: The machine it ran on: the manifest's hostname, else the host in the trace's name (None: unknown).
    host: str | None = None
    #: Each profiled step: (ProfilerStep number, step ms).
    per_step_ms: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RankSpread:
    """How a per-rank quantity (ms per step) is spread over the ranks: median, 90th percentile, the largest, and the
    rank that has it (the lowest such rank on a tie)."""

    p50_ms: float
    p90_ms: float
    max_ms: float
    max_rank: int


#: A slow rank is called data-starved when its extra data wait (over the other ranks' median) explains at least this
#: share of its extra own work per step; else the extra is its compute. Here, beside the results, because the analysis
#: applies it and every report states it.
DATA_REASON_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class SlowRank:
    """One of the slowest ranks (most own work per step), why it is slow, and the ranks that waited for it."""

    stats: RankStats
    #: "data" or "compute", decided as for the slowest rank (by :data:`DATA_REASON_SHARE`).
    reason: str
    #: Its data wait and its own work per step beyond the median of the other ranks'.
    extra_data_wait_ms: float
    extra_own_ms: float
    #: The ranks that did less own work and spent longer in collectives: they arrived first and waited for it.
    waited_by: tuple[int, ...]
    #: Their time per step in collectives beyond this rank's own (None when no rank waited).
    waited_ms_mean: float | None
    waited_ms_max: float | None


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """The ranks of one machine."""

    #: Hostname (None: unknown, for traces that do not say).
    host: str | None
    ranks: tuple[int, ...]
    #: Median over its ranks of their mean step.
    step_ms_p50: float
    #: Its rank with the most own work per step, and that work.
    slowest_rank: int
    slowest_own_ms: float


@dataclass(frozen=True)
class HistogramBin:
    """The ranks whose mean data wait per step is in [lo_ms, hi_ms) (the last bin includes hi_ms)."""

    lo_ms: float
    hi_ms: float
    ranks: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class StepHeatMap:
    """Step time per rank per profiled step: ``step_ms[i][j]`` is rank ``ranks[i]``'s step ``steps[j]`` (None: that
    rank did not record that step); ``lo_ms``/``hi_ms`` the smallest and largest cell."""

    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    step_ms: tuple[tuple[float | None, ...], ...]
    lo_ms: float
    hi_ms: float


@dataclass(frozen=True, kw_only=True)
class JobSummary:
    """A job of many ranks at a glance: how step time, data wait and collectives spread over the ranks, the slowest
    ranks and why, the ranks by machine, and the pictures' data (data wait per rank, step time per rank and step)."""

    step: RankSpread
    data_wait: RankSpread
    collectives: RankSpread
    #: The slowest ranks, slowest first (at most ``dlprof.analysis.ranks.SLOWEST_RANKS``).
    slowest: list[SlowRank]
    #: One group per host, the slowest first (by its slowest rank's own work).
    nodes: list[NodeGroup]
    data_wait_histogram: list[HistogramBin]
    heat_map: StepHeatMap


@dataclass(frozen=True, kw_only=True)
class RankComparison:
    """Every rank side by side, and the cross-rank effect."""

    ranks: list[RankStats]
    #: The rank the others wait for: the most own work per step.
    slowest_rank: int
    #: Why it is slowest: "data" (its extra own time is mostly data wait) or "compute".
    slowest_reason: str
    #: Its data wait per step beyond the other ranks' median.
    extra_data_wait_ms: float
    #: Per other rank: time per step in collectives beyond the slowest rank's own, i.e. waiting for it.
    waited_ms: dict[int, float]
    #: The collectives seen (``all_reduce``, ``broadcast``, ...), most time first.
    collectives: list[str]
    #: The ranks summed up: distributions, the slowest ranks, the machines (what a report of many ranks shows).
    summary: JobSummary | None = None
