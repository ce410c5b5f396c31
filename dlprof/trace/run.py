"""The event model: one rank's trace as the analysis reads it (:class:`TraceRun`), and the spans it holds.

Times stay in the trace's own unit, microseconds on the trace's clock (``ts``): relative to
``baseTimeNanoseconds`` on current Kineto traces, absolute Unix µs on old ones. Only differences are
ever used, so both work. :func:`dlprof.trace.build.build_run` makes a :class:`TraceRun` from a trace
document, and :func:`dlprof.trace.discover.load_run` from a file; every value in it lies within the
bounds below, so nothing downstream re-checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from dlprof.core.manifest import Manifest
from dlprof.results.record import PlainLaunch
from dlprof.trace import events as ev

# The bounds of every value in a TraceRun: the builder skips (and counts) an event beyond them.

#: Timestamps (µs) beyond this are no time: absolute Unix µs are ~1.7e15 today; 1e17 is the year 5138.
MAX_TS_US = 1e17
#: No profiled event lasts longer (µs, ~116 days); a larger ``dur`` is corrupt.
MAX_DUR_US = 1e13
#: No single copy moves more (256 TiB); a larger ``bytes`` is corrupt.
MAX_COPY_BYTES = 2**48
#: A ProfilerStep shorter than Kineto's finest resolution (1 ns) measured nothing: step rates divide by it.
MIN_STEP_US = 0.001
#: Worker and tensor counts and ids above this are corrupt (and would overflow a float downstream).
MAX_COUNT = 2**53


class Span(msgspec.Struct, frozen=True, gc=False):
    """A complete event: ``[start_us, end_us)`` on the trace clock.

    The spans are frozen msgspec structs, not dataclasses: a big trace makes millions of them, which a struct
    builds several times faster and in less memory (docs/ARCHITECTURE.md#facts-the-code-relies-on); they hold no
    containers that could form a cycle, so the cyclic GC does not track them.
    """

    name: str
    start_us: float
    end_us: float

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


class Step(Span, frozen=True, gc=False):
    number: int


class NextCall(Span, frozen=True, gc=False):
    """The main process inside ``DataLoader.__next__``; ``batch`` is (loader, epoch, batch) when dlprof linked it."""

    batch: tuple[int, int, int] | None


class LoaderSpan(Span, frozen=True, gc=False):
    """A dlprof span from a loader process (a worker, or the main process with ``num_workers=0``)."""

    pid: int
    cpu_us: float
    runq_us: float  # batch spans: runnable but waiting for a core (0 when unknown)
    tensors: int  # collate_fn spans: tensors in the batch (0 when unknown)
    worker: int
    batch: tuple[int, int, int]


class GpuActivity(Span, frozen=True, gc=False):
    kind: str  # "kernel" | "memcpy" | "memset"
    stream: int
    correlation: int | str | None  # an int, or a string in some traces (checks.checked_correlation)
    h2d: bool = False
    pinned: bool = False
    bytes: int = 0


class Launch(Span, frozen=True, gc=False):
    """A runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) with its correlation id."""

    correlation: int | str | None
    tid: int | str


class MemorySample(msgspec.Struct, frozen=True, gc=False):
    pid: int
    ts_us: float
    uss_mib: float
    pss_mib: float


@dataclass(kw_only=True)
class TraceRun:
    """One rank's trace, indexed for the analysis."""

    name: str
    path: Path
    manifest: Manifest | None
    rank: int | None
    main_pid: int | str
    main_tid: int | str
    steps: list[Step]
    next_calls: list[NextCall]
    host_ops: list[Span]  # cpu_op / user_annotation on the main thread (no ProfilerStep)
    backward: list[Span]  # autograd engine work, any thread of the main process
    optimizer: list[Span]
    h2d_host: list[Span]  # host copy ops that queued a host-to-device memcpy
    gpu: list[GpuActivity]
    launches: list[Launch]
    loader_spans: list[LoaderSpan]
    memory: list[MemorySample]
    #: Collectives of the training process (any thread, and NCCL kernels), named by kind (``all_reduce``):
    #: communication, and waiting for the other ranks.
    collectives: list[Span] = field(default_factory=list)
    #: The trace clock's zero in µs since the Unix epoch (``baseTimeNanoseconds``; 0 on old traces, whose
    #: ``ts`` are absolute): lines up the ranks of one job, whose traces each have their own base.
    base_us: float = 0.0
    process_names: dict[int | str, str] = field(default_factory=dict)
    event_count: int = 0
    #: What was wrong with the manifest (wrong-typed fields read as unknown, an unreadable version).
    manifest_problems: tuple[str, ...] = ()
    #: What was wrong with the events (malformed ones skipped, duplicates counted once), for the report's basis.
    trace_problems: tuple[str, ...] = ()
    #: The steps a launch of the recorded command without the profiler timed (``dlprof record --plain-launch``).
    plain_launch: PlainLaunch | None = None

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu)

    @property
    def has_loader_spans(self) -> bool:
        return bool(self.loader_spans)

    @property
    def loads_in_main_process(self) -> bool | None:
        """Whether batches were loaded in the main process (num_workers=0), from the iterator's name; None if no
        DataLoader was seen."""
        if not self.next_calls:
            return None
        return all(ev.SINGLE_PROCESS_ITERATOR in c.name for c in self.next_calls)
