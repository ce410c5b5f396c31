"""What ``dlprof analyze`` hands every renderer: the Report of one or more runs (dlprof.workflows.analyze builds it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlprof.core.manifest import Manifest
from dlprof.core.schema import STATUS_COMPLETE, STATUS_TRAINING
from dlprof.core.version import REPORT_SCHEMA, __version__
from dlprof.results.advice import Advice
from dlprof.results.analysis import GpuStats, LoaderStats, RankComparison, StepBreakdown, UnprofiledStats
from dlprof.results.trials import TrialsResult

SCHEMA = REPORT_SCHEMA


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What the run was; ``None`` where the trace cannot tell (a trace without dlprof's manifest)."""

    name: str
    trace_file: str
    status: str | None
    device: str
    num_workers: int | None
    batch_size: int | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    usable_cores: int | None
    ram_total_mib: int | None
    gpu_name: str | None
    torch_version: str | None
    steps_recorded: int
    batches_per_step: float
    has_worker_spans: bool

    @property
    def incomplete(self) -> bool:
        """The recording ended early (``partial``): its numbers cover the steps it kept."""
        return self.status is not None and self.status not in (STATUS_COMPLETE, STATUS_TRAINING)

    @property
    def training(self) -> bool:
        """The trials' traces of a ``--then best|keep`` recording, written while the training goes on (``training``):
        they cover the steps to the trials' end; the rest is measured when the training ends."""
        return self.status == STATUS_TRAINING


@dataclass(frozen=True)
class Lane:
    """One row of the timeline picture: ``(kind, start_ms, end_ms)`` bars from the picture's start.

    Kinds: the step categories (``data_wait``, ``h2d``, ``forward``, ``backward``, ``optimizer``,
    ``other``) on the main thread; ``dataset fetch``, ``tokenizer``, ``collate_fn`` on loader lanes;
    ``gpu`` on the GPU lane.
    """

    label: str
    bars: list[tuple[str, float, float]]


@dataclass(frozen=True)
class TimelinePicture:
    """A few consecutive steps: the main thread, each loader process, and the GPU."""

    duration_ms: float
    step_starts_ms: list[float]
    lanes: list[Lane]
    #: A job's ranks that have no lane: beyond 16, only the slowest ranks' training threads are drawn.
    ranks_not_drawn: int = 0


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """Everything dlprof found about one run: what it was, where its steps' time went, its loader and GPU, the
    advice, and the timeline picture."""

    info: RunInfo
    steps: StepBreakdown
    loader: LoaderStats | None
    gpu: GpuStats | None
    advice: Advice
    timeline: TimelinePicture
    #: The training's speed without the profiler (reference steps), and the profiler's overhead.
    unprofiled: UnprofiledStats | None = None
    #: The run's manifest as parsed (None for a trace dlprof did not record).
    manifest: Manifest | None = None
    #: A run of several ranks: every rank side by side. The rest of this report is then the slowest
    #: rank's (it sets the job's pace, and num_workers is set per rank).
    ranks: RankComparison | None = None
    #: ``dlprof record --try-workers``: every tried setting measured in the running training (None: no trials).
    trials: TrialsResult | None = None
    #: Ranks of the job's world size (the manifests' ``world_size``) that left no trace here; the report is made from
    #: the others.
    missing_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Skipped:
    """A run, or a file in a run directory, left out of the report: its path and why (one line)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Report:
    """What ``dlprof analyze`` reports: one run, or each run of a directory of runs; every renderer takes it."""

    runs: list[RunReport]
    schema: str = SCHEMA
    #: The dlprof that made it, stamped beside the schema in every document written.
    dlprof_version: str = __version__
    #: What was left out: unreadable runs of a directory of runs, files of a run directory that are not traces.
    skipped: list[Skipped] = field(default_factory=list)
