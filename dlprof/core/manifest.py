"""The manifest: what ``dlprof record`` knew about a run, stored in each trace as its top-level ``dlprof`` object.

One versioned, frozen dataclass, the contract between the recorder (capture/, which writes it with
:meth:`Manifest.to_dict`) and the analysis (trace/, which parses it once with :func:`parse_manifest`).
Past that boundary code reads typed fields, never string keys.

Parsing is forgiving field by field: a field of the wrong type is read as unknown (``None``, or an
empty collection) and named among the problems :func:`parse_manifest` returns; a manifest of an older or
newer version than this dlprof writes is reported there too, never silently taken for the current one.

Like :mod:`dlprof.core.schema`, this module imports nothing but the standard library and the bottom floor, so both
sides can use it. Its parser also reads the other JSON documents dlprof writes for itself
(:func:`parse_dataclass`: a rank's recording, :class:`dlprof.results.record.RankResult`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dlprof.core.errors import UsageError
from dlprof.core.lenient import Invalid, build, why_unfit

# The trials' types are the manifest's own, defined apart (re-exported: ``manifest.Trials``, ...).
from dlprof.core.trial_manifest import Then as Then
from dlprof.core.trial_manifest import Trials as Trials
from dlprof.core.trial_manifest import TrialSegment as TrialSegment
from dlprof.core.version import MANIFEST_VERSION

# The manifest's versions (this dlprof writes MANIFEST_VERSION, kept beside dlprof's own version in
# dlprof.core.version). 1: dlprof 0.1 (no unprofiled step times, no epochs). 2: adds ``step_clock`` (every step's
# wall, CPU, run-queue and data-wait time, profiled or not), loader ``length`` and ``epochs``, the worker start-up
# calibration, ``overrides`` and ``stopped_early``.
# 3: adds ``trials`` (``dlprof record --try-workers``: candidate settings trained in turn in the same process) and
# the step phase ``trial``. 4: adds ``job`` (the key the nodes of a job over several machines share).
# 5: adds ``batches`` (what the probe measured of each batch: tokens, padding, bytes, fingerprint), the host's
# ``/dev/shm`` and thread settings, the processes' threads and CPU time, and a loader's ``dataset_shards``.
# 6: adds the trials' padding segment (``trim_padding``, ``trim_checked``, ``trimmable_pct``, ``trim_refused``), each
# segment's ``worker_pids`` and the trials' ``max_worker_memory_mib``.
# 7: adds what the training did after its trials (``--then best|keep``: ``Trials.then``), the step phase ``tuned``
# and the run status ``training`` (the trials' traces, written while the training goes on).
# 8: adds the step clock's ``thread_cpu_ms`` (the training thread's own CPU) and ``wait_others_cpu_ms`` (the other
# threads' CPU inside the data waits), and the host's ``omp_wait_policy``.

#: Versions this dlprof can read: older ones lack fields, which are then unknown.
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8)
#: The first version with unprofiled step times (``step_clock``).
STEP_CLOCK_VERSION = 2

# Phases of a training step, by what the profiler was doing during it.
PHASE_BEFORE = "before"  # before the profiler window: start-up and warm-up, unprofiled
PHASE_PROFILED = "profiled"  # inside the profiler window (warm-up or active): profiled
PHASE_AFTER = "after"  # after the window: unprofiled, what the user's training really does (the reference steps)
#: During the in-process trials (``--try-workers``, after the reference steps): unprofiled, but at the DataLoader
#: settings being tried, not the script's own (``Manifest.trials`` says which step ran which).
PHASE_TRIAL = "trial"
#: After the trials, with ``--then best`` or ``--then keep``: unprofiled, the training going on at the last segment's
#: setting until the chosen one is switched to, then at it (``Trials.then`` says from which step).
PHASE_TUNED = "tuned"
PHASES = (PHASE_BEFORE, PHASE_PROFILED, PHASE_AFTER, PHASE_TRIAL, PHASE_TUNED)

#: Steps from an epoch's start over which restarting workers shows: forking slows the training process
#: for a few steps (copy-on-write page faults), besides the wait for the first batch. The recorder times
#: this many steps after a boundary; the analysis counts their excess as the restart's cost.
EPOCH_SETTLE_STEPS = 5
#: The trials' padding segment (batches trimmed to their longest real sequence) is planned when trimming drops at least
#: this share of the positions of the batches checked, %: below it the gain is within the trials' spread, not worth a
#: segment.
TRIM_MIN_PCT = 10.0
#: The reference steps end at the latest after this many times ``--reference-steps`` (a run whose steps never
#: settle, or too short to make throughput.MIN_SECONDS, still stops; its speed is then flagged untrusted).
MAX_REFERENCE_FACTOR = 4
#: Short epochs are timed whole after the window, as many as make at least this many batches in all:
#: one epoch's time varies with the way its samples fall into batches (dynamic padding).
MIN_WHOLE_EPOCH_BATCHES = 100


def whole_epochs_to_time(epoch_batches: int) -> int:
    """How many whole epochs of ``epoch_batches`` batches the recorder times after the window."""
    return max(1, -(-MIN_WHOLE_EPOCH_BATCHES // max(1, epoch_batches)))


@dataclass(frozen=True)
class Schedule:
    """``torch.profiler.schedule`` settings, one repeat: skip ``wait`` steps, warm up, record ``active``.

    ``step_mode`` is what a step was, once recorded: ``"optimizer"`` (an optimizer step), ``"batch"`` (a
    batch returned, for a script without an optimizer), or None (no step was taken).
    """

    wait: int
    warmup: int
    active: int
    step_mode: str | None = None

    def check(self) -> None:
        """Raise UsageError unless the schedule can record a step that excludes start-up."""
        for name in ("wait", "warmup"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name} {getattr(self, name)}: must be >= 0")
        if self.active < 1:
            raise UsageError(f"--active {self.active}: must be >= 1 (the number of steps to record)")
        if self.wait + self.warmup < 1:
            raise UsageError("--wait/--warmup: at least one must be >= 1, or the first recorded step includes start-up")


@dataclass(frozen=True)
class StepCounts:
    run: int
    recorded: int


@dataclass(frozen=True)
class MainProcessCpu:
    """The main process over the profiled steps: wall, CPU (all threads) and the training thread's run-queue wait."""

    steps: int
    wall_ms_per_step: float
    cpu_ms_per_step: float
    runq_ms_per_step: float = 0.0


@dataclass(frozen=True, kw_only=True)
class StepClock:
    """Every training step the recorder saw, profiled or not, timed with cheap clocks at the step boundary.

    Columns of equal length, one entry per step in order. ``wait_ms`` is the time the main thread spent
    in ``DataLoader.__next__`` during the step; ``epoch_start`` marks steps in which a DataLoader
    iterator was created (workers started); ``fork_probe`` the steps that began right after the fork probe.
    """

    phase: tuple[str, ...] = ()
    wall_ms: tuple[float, ...] = ()
    cpu_ms: tuple[float, ...] = ()
    runq_ms: tuple[float, ...] = ()
    wait_ms: tuple[float, ...] = ()
    batches: tuple[int, ...] = ()
    epoch_start: tuple[bool, ...] = ()
    #: The step after which the training process forked once (runs without workers: what forking workers costs).
    fork_probe: tuple[bool, ...] = ()
    #: Batches already made when the step asked for its first one (that one included: kept by a switch, or queued by
    #: the workers), -1 where unknown; empty in recordings made before it was kept. A queue that shrinks over timed
    #: steps tells a surplus being used up (:func:`dlprof.core.throughput.surplus_steps`).
    ready: tuple[int, ...] = ()
    #: The main process's minor page faults during the step (all its threads; ``getrusage``), and its kernel CPU time
    #: in ms (part of ``cpu_ms``); both empty in recordings made before they were kept.
    faults: tuple[int, ...] = ()
    sys_ms: tuple[float, ...] = ()
    #: The CPU ms the main process's other threads (intra-op, pin-memory) took while the training thread waited in
    #: ``DataLoader.__next__`` (what they take there is spin-waiting or pinning); empty in older recordings.
    wait_others_cpu_ms: tuple[float, ...] = ()
    #: The training thread's own CPU ms (the rest of ``cpu_ms`` is its other threads'); empty in older recordings.
    thread_cpu_ms: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.phase)

    def columns_agree(self) -> bool:
        """Whether every column has one entry per step (a parser that skipped an invalid entry breaks this); the
        columns added later (:data:`LATER_STEP_COLUMNS`) may be empty (older recordings)."""
        lengths = {
            len(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name not in LATER_STEP_COLUMNS or getattr(self, f.name)
        }
        return len(lengths) <= 1


#: Step clock columns that recordings made before them lack: empty there.
LATER_STEP_COLUMNS = frozenset({"ready", "faults", "sys_ms", "wait_others_cpu_ms", "thread_cpu_ms"})


@dataclass(frozen=True)
class Epoch:
    """One iteration over a DataLoader: when it started, how long until its first batch, how long its end took."""

    start_ns: int
    first_batch_ms: float | None  # iterator creation (workers started) to the first batch returned
    batches: int
    #: The __next__ that found the epoch exhausted (workers shut down); None if never reached.
    end_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """One DataLoader, with its settings as the DataLoader really got them."""

    id: int
    num_workers: int | None = None
    batch_size: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    drop_last: bool | None = None
    timeout_s: float | None = None
    in_order: bool | None = None
    start_method: str | None = None
    dataset: str | None = None
    dataset_len: int | None = None
    iterable_dataset: bool | None = None
    sampler: str | None = None
    collate_fn: str | None = None
    iterations: int = 0
    batches: int = 0
    length: int | None = None  # len(loader): batches per epoch, when the sampler has a length
    epochs: tuple[Epoch, ...] = ()
    num_workers_requested: int | None = None  # what the script asked for, when dlprof sweep overrode it
    #: The training framework that created the DataLoader ("transformers", "ms-swift", "llamafactory"), None for the
    #: script's own.
    created_by: str | None = None
    #: Shards of an iterable dataset that says how many it has (Hugging Face ``datasets``' ``n_shards``); None: unknown.
    dataset_shards: int | None = None


@dataclass(frozen=True, kw_only=True)
class WorkerStart:
    """A DataLoader worker process as it started: for ``loader``'s iteration ``epoch``, at ``start_ns``."""

    pid: int
    worker_id: int
    loader: int
    epoch: int
    start_ns: int


@dataclass(frozen=True, kw_only=True)
class Gpu:
    name: str | None = None
    count: int | None = None
    memory_mib: int | None = None
    cuda: str | None = None
    hip: str | None = None


@dataclass(frozen=True)
class Handoff:
    """This machine's cost of receiving a ready batch from a worker: ``per_batch + tensors * per_tensor``."""

    per_batch_ms: float
    per_tensor_ms: float
    #: The worker's CPU to send a batch (its tensors moved to shared memory): ``worker_per_batch + tensors *
    #: worker_per_tensor``.
    worker_per_batch_ms: float | None = None
    worker_per_tensor_ms: float | None = None


@dataclass(frozen=True)
class WorkerStartup:
    """This machine's cost of starting and stopping DataLoader workers: ``fixed + n * per_worker``, per epoch."""

    fixed_ms: float
    per_worker_ms: float


@dataclass(frozen=True, kw_only=True)
class Host:
    hostname: str | None = None
    usable_cores: int | None = None
    cpu_count: int | None = None
    ram_total_mib: int | None = None
    ram_available_mib: int | None = None
    gpu: Gpu | None = None
    torch_threads: int | None = None
    platform: str | None = None
    handoff: Handoff | None = None
    worker_startup: WorkerStartup | None = None
    #: ``/dev/shm``'s size and free bytes when the recording began (workers hand batches over through it); None where
    #: there is none (not Linux) or it could not be read.
    shm_total_bytes: int | None = None
    shm_free_bytes: int | None = None
    #: torch's sharing strategy in the training process (``file_descriptor`` or ``file_system``).
    sharing_strategy: str | None = None
    #: The thread settings of the training process's environment, as set (None: unset): ``TOKENIZERS_PARALLELISM``,
    #: ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, and ``OMP_WAIT_POLICY`` (whether idle OpenMP threads spin).
    tokenizers_parallelism: str | None = None
    omp_num_threads: str | None = None
    mkl_num_threads: str | None = None
    omp_wait_policy: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProcessMemory:
    pid: int
    role: str
    worker_id: int | None = None
    samples: int = 0
    duration_s: float = 0.0
    uss_mib_first: float | None = None
    uss_mib_last: float | None = None
    uss_mib_peak: float | None = None
    pss_mib_first: float | None = None
    pss_mib_last: float | None = None
    pss_mib_peak: float | None = None
    #: The most threads the process had at a sample (``/proc/<pid>/task``), and its CPU time over the samples
    #: (user + system, s), read from outside by the memory sampler; None where unread.
    threads_peak: int | None = None
    cpu_s: float | None = None
    #: Each sample's time (ms from ``first_sample_ns``, ``time.time_ns()``'s clock) and USS (MiB), for growth over
    #: time: copy-on-read.
    first_sample_ns: int | None = None
    sample_ms: tuple[float, ...] = ()
    uss_mib: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BatchFacts:
    """What the probe measured of each batch a ``collate_fn`` returned, in the process that made it: columns of equal
    length, one entry per batch, in the order the batches were made.

    Tokens are counted on the batch's token tensors (``input_ids``, else the first 2-D integer tensor): ``rows``
    sequences of ``width`` positions, ``real_tokens`` of them not padding (by ``padding_source``), the longest real
    sequence ``longest`` positions. ``rows`` is 0 where the batch had no token tensor.
    """

    loader: tuple[int, ...] = ()
    epoch: tuple[int, ...] = ()
    batch: tuple[int, ...] = ()
    #: The DataLoader worker that made it (-1: the main process, num_workers=0), and when its ``collate_fn`` returned
    #: (``time.time_ns()``).
    worker: tuple[int, ...] = ()
    made_ns: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()
    width: tuple[int, ...] = ()
    real_tokens: tuple[int, ...] = ()
    longest: tuple[int, ...] = ()
    #: Bytes of all the batch's tensors (what a worker hands over through shared memory).
    nbytes: tuple[int, ...] = ()
    #: A digest of a sample of each tensor's bytes (hex): equal batches have equal fingerprints.
    fingerprint: tuple[str, ...] = ()
    #: How real tokens were told from padding: ``attention_mask``, ``labels`` (positions labelled -100 beyond the
    #: real tokens), ``pad_id`` (the tokenizer's pad token id), or None (not known: ``real_tokens`` = positions).
    padding_source: str | None = None
    #: What measuring a batch cost in its process, median µs (None: not measured).
    check_us: float | None = None
    #: Batches the probe could not measure (an unusual batch structure): not in the columns.
    unmeasured: int = 0

    def __len__(self) -> int:
        return len(self.loader)

    def columns_agree(self) -> bool:
        """Whether every column has one entry per batch."""
        columns = ("loader", "epoch", "batch", "worker", "made_ns", "rows", "width", "real_tokens", "longest", "nbytes")
        return len({len(getattr(self, name)) for name in (*columns, "fingerprint")}) <= 1


@dataclass(frozen=True)
class MemorySummary:
    interval_ms: int | None = None
    processes: tuple[ProcessMemory, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What ``dlprof record`` knew about one rank of a run. ``None`` means unknown."""

    manifest_version: int
    dlprof_version: str | None = None
    status: str | None = None  # schema.STATUS_COMPLETE | schema.STATUS_PARTIAL
    error: str | None = None
    exit_code: int | None = None
    command: tuple[str, ...] = ()
    script: tuple[str, ...] = ()
    rank: int | None = None
    world_size: int | None = None
    #: Ranks on this rank's machine (``LOCAL_WORLD_SIZE``): they share its cores and RAM.
    local_rank: int | None = None
    local_world_size: int | None = None
    #: The command line of this rank's own process (a launcher's worker: ``python -u train.py ...``).
    process_argv: tuple[str, ...] = ()
    #: The communication backend (``gloo``, ``nccl``) when the process group existed during the window.
    backend: str | None = None
    schedule: Schedule | None = None
    steps: StepCounts | None = None
    main_process_cpu: MainProcessCpu | None = None
    loader: LoaderConfig | None = None  # the loader that returned the most traced batches
    loaders: tuple[LoaderConfig, ...] = ()
    workers: tuple[WorkerStart, ...] = ()
    host: Host = field(default_factory=Host)
    versions: dict[str, str] = field(default_factory=dict)
    clock: dict[str, Any] = field(default_factory=dict)
    memory: MemorySummary = field(default_factory=MemorySummary)
    span_records_skipped: int = 0
    step_clock: StepClock = field(default_factory=StepClock)
    #: Settings dlprof imposed on the script (``dlprof sweep``): ``{"num_workers": 4}``.
    overrides: dict[str, Any] = field(default_factory=dict)
    #: Training was stopped by dlprof once the window and the reference steps were done (not --run-to-end).
    stopped_early: bool = False
    #: Recorded with ``--redact``: host names, the user, command-line arguments and paths are placeholders.
    redacted: bool = False
    #: ``dlprof record --try-workers``: the settings tried after the reference steps (None: no trials).
    trials: Trials | None = None
    #: The job over several machines this rank belongs to, as every node's launcher shares it (``rdzv-id=JOB``,
    #: ``run-id=ID``, ``endpoint=HOST:PORT``; ``sha256:...`` when recorded with ``--redact``): run directories
    #: written node by node are one run when their traces hold the same job. None: a job of its own, or unknown.
    job: str | None = None
    #: What the probe measured of each batch (version 5; empty before).
    batches: BatchFacts = field(default_factory=BatchFacts)

    def to_dict(self) -> dict:
        """The JSON-ready form written into the trace."""
        return dataclasses.asdict(self)


def parse_manifest(document: Any) -> tuple[Manifest | None, tuple[str, ...]]:
    """Parse a trace's ``dlprof`` object: the manifest (``None`` if unusable) and what was wrong with it.

    A field of the wrong type is read as unknown and named among the problems. A manifest of a
    version this dlprof cannot read gives ``None`` and a problem saying so: the analysis then treats
    the run as a trace without dlprof's manifest, and says why.
    """
    if document is None:
        return None, ()
    if not isinstance(document, dict):
        return None, ("the 'dlprof' manifest is not an object: analysed as a trace without dlprof's manifest",)
    version = document.get("manifest_version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > MANIFEST_VERSION
        fix = "upgrade dlprof to read it" if newer else "record the run again with this dlprof"
        if isinstance(version, int):
            shown = str(version)
        else:  # quoted (text, not a number), unless it is a NaN or infinity (a number or text) or a deep value
            unfit = why_unfit(version)
            shown = f"({unfit.removeprefix('is ')})" if unfit else repr(str(version)[:40])
        return None, (
            (
                f"manifest version {shown} is not one this dlprof reads ({', '.join(map(str, READABLE_VERSIONS))}): "
                f"analysed as a trace without dlprof's manifest; {fix}"
            ),
        )
    problems: list[str] = []
    try:
        manifest = build(Manifest, document, "manifest", problems)
    except Invalid as invalid:
        return None, (f"{invalid}: analysed as a trace without dlprof's manifest",)
    if version < STEP_CLOCK_VERSION:
        problems.append(
            f"manifest version {version} (dlprof {manifest.dlprof_version or 'unknown'}): it has no unprofiled step"
            " times, so predictions are of profiled steps; record again with this dlprof for predictions of your"
            " unprofiled training"
        )
    if not manifest.step_clock.columns_agree():
        problems.append("manifest.step_clock columns differ in length: read as unknown")
        manifest = dataclasses.replace(manifest, step_clock=StepClock())
    if not manifest.batches.columns_agree():
        problems.append("manifest.batches columns differ in length: read as unknown")
        manifest = dataclasses.replace(manifest, batches=BatchFacts())
    return manifest, tuple(problems)
