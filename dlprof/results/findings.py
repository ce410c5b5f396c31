"""Faults of the input pipeline beyond the DataLoader's settings (dlprof.advice.findings builds these): each with its
evidence from the run, its fix in one line, and what the fix buys where that can be told."""

from __future__ import annotations

from dataclasses import dataclass

#: What a finding asks of its reader (:attr:`Finding.severity`): a fault that loses samples or crashes training, one
#: that costs speed or memory, or a fact worth knowing that costs little.
SEVERITY_ERROR = "error"
SEVERITY_WARNING = "warning"
SEVERITY_INFO = "info"
SEVERITIES = (SEVERITY_ERROR, SEVERITY_WARNING, SEVERITY_INFO)

#: What :attr:`Finding.gain_pct` rests on: measured in the run's trials, predicted by the throughput model, an upper
#: bound ("up to"), or nothing (no gain in speed can be told; ``gain_pct`` is None).
GAIN_MEASURED = "measured"
GAIN_PREDICTED = "predicted"
GAIN_UP_TO = "up to"
GAIN_NONE = "none"
GAIN_BASES = (GAIN_MEASURED, GAIN_PREDICTED, GAIN_UP_TO, GAIN_NONE)

#: The findings' ids, one per kind of fault (the JSON's ``findings[].id``).
FINDING_PADDING = "padding"
FINDING_PRETOKENIZE = "pretokenize"
FINDING_UNSHARDED_ITERABLE = "unsharded-iterable"
FINDING_FEW_SHARDS = "fewer-shards-than-workers"
FINDING_SHARED_MEMORY = "shared-memory"
FINDING_THREADS = "threads-oversubscribed"
FINDING_COPY_ON_READ = "copy-on-read"
FINDING_SPIN_WAIT = "training-threads-spin"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One fault of the input pipeline, found with evidence from the run."""

    #: One of the ``FINDING_*`` ids.
    id: str
    #: One of :data:`SEVERITIES`.
    severity: str
    #: What the run showed, with its numbers (one or two sentences).
    evidence: str
    #: The fix, in one line.
    fix: str
    #: How much faster training gets with the fix, % of the recorded speed; None where no gain in speed can be told
    #: (a fault that loses samples, or memory).
    gain_pct: float | None
    #: One of :data:`GAIN_BASES`: what ``gain_pct`` rests on.
    gain_basis: str
    #: A short title for headings and the headline (``"pad to the longest sequence"``).
    title: str
    #: The fact the gain comes from, in a few words, for the headline (``"62 % of the tokens are padding"``); None
    #: where the finding has no gain.
    reason: str | None = None


#: How a run's batches are padded (:attr:`PaddingFacts.mode`): every batch to one fixed width beyond its longest
#: sequence (``padding="max_length"``), each batch to its own longest sequence (dynamic padding), or otherwise (to a
#: multiple, or widths that vary beyond the longest).
PADDED_FIXED = "fixed length"
PADDED_TO_LONGEST = "to the batch's longest"
PADDED_OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class PaddingFacts:
    """The training loader's token batches: real tokens against the positions computed on."""

    #: Batches with a token tensor.
    batches: int
    #: Positions computed on (rows x width), real tokens among them, and positions if each batch were padded to its
    #: longest real sequence (rows x longest); summed over the batches.
    padded_tokens: int
    real_tokens: int
    longest_tokens: int
    #: The mean over batches of each batch's share of padding, %.
    padding_pct: float
    mode: str
    #: The one width every batch has (``mode`` fixed length), else None.
    width: int | None
    #: How real tokens were told from padding (:attr:`dlprof.core.manifest.BatchFacts.padding_source`).
    source: str | None


@dataclass(frozen=True, kw_only=True)
class DuplicateFacts:
    """Batches of one epoch that different workers made alike (same fingerprint): an unsharded iterable dataset."""

    #: Batches fingerprinted, made by workers; of them, those another worker had already made in the same epoch.
    batches: int
    duplicated: int
    duplicated_pct: float
    #: Workers that made batches.
    workers: int
    #: Whether the dataset is an IterableDataset (None: unknown), its shards (None: unknown) and the recorded count.
    iterable: bool | None
    shards: int | None
    num_workers: int | None


@dataclass(frozen=True, kw_only=True)
class SharedMemoryFacts:
    """The bytes workers hand over through ``/dev/shm`` against its size."""

    #: A batch's bytes (all its tensors): median and 90th percentile over the batches.
    batch_bytes_p50: int
    batch_bytes_p90: int
    #: Batches each worker keeps in flight (``prefetch_factor``; PyTorch's default 2 when unknown).
    prefetch_factor: int
    shm_total_bytes: int
    shm_free_bytes: int
    #: Ranks on this machine: they share its ``/dev/shm``, each rank's workers a share of the free space.
    ranks_sharing: int
    #: The recorded ``num_workers`` and its batches in flight (p90 bytes x prefetch_factor x workers); None: unknown.
    recorded_workers: int | None
    recorded_bytes: int | None
    #: The most workers whose batches in flight fit in the free space (0: not one worker's).
    max_workers: int


@dataclass(frozen=True, kw_only=True)
class WorkerThreads:
    """One DataLoader worker process's threads and CPU, read from outside it."""

    pid: int
    worker_id: int | None
    threads_peak: int
    #: CPU time over wall time while it was sampled: above 1, more than one thread ran at once.
    cpu_per_wall: float | None


@dataclass(frozen=True, kw_only=True)
class ThreadFacts:
    """The threads that share the cores: the workers', training's intra-op threads, and the usable cores."""

    workers: tuple[WorkerThreads, ...]
    #: torch's intra-op threads in the training process, and this rank's usable cores (None: unknown).
    torch_threads: int | None
    usable_cores: int | None
    #: The environment's settings as recorded (None: unset).
    tokenizers_parallelism: str | None
    omp_num_threads: str | None
    #: The workers call a tokenizer (tokenizer spans in the worker processes).
    tokenizer_in_workers: bool
    #: The training process imported Hugging Face's fast ``tokenizers`` library (its Rust thread pool).
    tokenizers_imported: bool = False
    #: The training thread's waits for a core, % of the step (unprofiled when known); None: unknown.
    training_runq_pct: float | None


@dataclass(frozen=True, kw_only=True)
class WorkerGrowth:
    """One worker's private memory (USS) against the samples it had touched, from its first batch on."""

    pid: int
    worker_id: int | None
    #: Memory samples aligned with its batches, the samples it touched over them, its USS growth over them (MiB).
    points: int
    samples_touched: int
    growth_mib: float
    #: The least-squares growth per sample touched (KiB) and the correlation of USS with samples touched (-1..1).
    kib_per_sample: float
    correlation: float


@dataclass(frozen=True, kw_only=True)
class CopyOnReadFacts:
    """Workers' memory growth over the samples they touched."""

    workers: tuple[WorkerGrowth, ...]
    #: The dataset is map-style (indexed; None: unknown).
    map_style: bool | None
    #: The recorded ``num_workers``.
    num_workers: int | None


@dataclass(frozen=True, kw_only=True)
class SpinFacts:
    """The training process's threads beside the training thread (intra-op, pin-memory) over its steady unprofiled
    steps, means per step (ms): the CPU they took while the training thread slept in ``DataLoader.__next__`` (none
    of the training's own work runs then: what they take is spin-waiting), and the CPU the step needed of the cores
    the workers share."""

    steps: int
    step_ms: float
    wait_ms: float
    #: The other threads' CPU inside the data waits, and over the whole step.
    others_in_wait_ms: float
    others_cpu_ms: float
    #: The training thread's own CPU, and the workers' (their batches' CPU, per step).
    thread_cpu_ms: float
    workers_cpu_ms: float
    num_workers: int
    torch_threads: int | None
    usable_cores: int
    #: ``OMP_WAIT_POLICY`` as recorded (None: unset).
    omp_wait_policy: str | None = None

    @property
    def spinning_cores(self) -> float:
        """The cores the other threads kept busy while the training thread waited for data."""
        return self.others_in_wait_ms / self.wait_ms if self.wait_ms > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class PipelineFacts:
    """What the run shows of its input pipeline beyond the DataLoader's settings (:mod:`dlprof.analysis.pipeline`);
    None where the recording holds nothing to tell it from."""

    padding: PaddingFacts | None = None
    duplicates: DuplicateFacts | None = None
    shared_memory: SharedMemoryFacts | None = None
    threads: ThreadFacts | None = None
    copy_on_read: CopyOnReadFacts | None = None
    spin: SpinFacts | None = None
