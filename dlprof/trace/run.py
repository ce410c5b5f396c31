"""A run: its trace file, manifest and the events the analysis needs, indexed once.

Times stay in the trace's own unit, microseconds on the trace's clock (``ts``): relative to
``baseTimeNanoseconds`` on current Kineto traces, absolute Unix µs on old ones. Only differences are
ever used, so both work.
"""
from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dlprof import schema
from dlprof.errors import TraceNotFoundError
from dlprof.manifest import Manifest, parse_manifest
from dlprof.trace import events as ev
from dlprof.trace.reader import read_trace

TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass(frozen=True)
class Span:
    """A complete event: ``[start_us, end_us)`` on the trace clock."""

    name: str
    start_us: float
    end_us: float

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class Step(Span):
    number: int


@dataclass(frozen=True)
class NextCall(Span):
    """The main process inside ``DataLoader.__next__``; ``batch`` is (loader, epoch, batch) when dlprof linked it."""

    batch: tuple[int, int, int] | None


@dataclass(frozen=True)
class LoaderSpan(Span):
    """A dlprof span from a loader process (a worker, or the main process with ``num_workers=0``)."""

    pid: int
    cpu_us: float
    runq_us: float  # batch spans: runnable but waiting for a core (0 when unknown)
    tensors: int  # collate_fn spans: tensors in the batch (0 when unknown)
    worker: int
    batch: tuple[int, int, int]


@dataclass(frozen=True)
class GpuActivity(Span):
    kind: str  # "kernel" | "memcpy" | "memset"
    stream: int
    correlation: int | None
    h2d: bool = False
    pinned: bool = False
    bytes: int = 0


@dataclass(frozen=True)
class Launch(Span):
    """A runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) with its correlation id."""

    correlation: int | None
    tid: int


@dataclass(frozen=True)
class MemorySample:
    pid: int
    ts_us: float
    uss_mib: float
    pss_mib: float


@dataclass
class TraceRun:
    """One rank's trace, indexed for the analysis."""

    name: str
    path: Path
    manifest: Manifest | None
    rank: int | None
    main_pid: int
    main_tid: int
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
    process_names: dict[int, str] = field(default_factory=dict)
    event_count: int = 0
    #: What was wrong with the manifest (wrong-typed fields read as unknown, an unreadable version).
    manifest_problems: tuple[str, ...] = ()

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu)

    @property
    def has_loader_spans(self) -> bool:
        return bool(self.loader_spans)

    @property
    def loads_in_main_process(self) -> bool | None:
        """Whether batches were loaded in the main process (num_workers=0), from the iterator's name; None if no DataLoader was seen."""
        if not self.next_calls:
            return None
        return all(ev.SINGLE_PROCESS_ITERATOR in c.name for c in self.next_calls)


def _span(event: dict) -> tuple[float, float]:
    start = float(event["ts"])
    return start, start + float(event.get("dur", 0) or 0)


def _main_thread(steps: list[dict], next_events: list[dict], host: list[dict]) -> tuple[int, int]:
    """The (pid, tid) that runs the training loop: where ProfilerStep lives, else most DataLoader waits, else most ops."""
    for candidates in (steps, next_events, host):
        if candidates:
            (pid, tid), _ = Counter((e.get("pid"), e.get("tid")) for e in candidates).most_common(1)[0]
            return pid, tid
    return -1, -1


def _batch_key(args: dict) -> tuple[int, int, int] | None:
    try:
        return (int(args[schema.ARG_LOADER]), int(args[schema.ARG_EPOCH]), int(args[schema.ARG_BATCH]))
    except (KeyError, TypeError, ValueError):
        return None


def build_run(document: dict, path: Path, name: str) -> TraceRun:
    """Index the events of one trace document."""
    raw_steps, raw_next, raw_host, raw_backward, raw_optimizer = [], [], [], [], []
    raw_gpu, raw_runtime, raw_loader, raw_memory, copy_ops, raw_collectives = [], [], [], [], [], []
    process_names: dict[int, str] = {}
    for event in document["traceEvents"]:
        if not isinstance(event, dict):
            continue
        ph = event.get("ph")
        if ph == "M":
            if event.get("name") == "process_name":
                process_names[event.get("pid")] = str(event.get("args", {}).get("name", ""))
            continue
        if ph == "C":
            if event.get("name") == schema.MEMORY_COUNTER:
                raw_memory.append(event)
            continue
        if ph != "X" or "ts" not in event:
            continue
        cat = ev.category(event)
        event_name = str(event.get("name", ""))
        if cat == schema.CATEGORY:
            raw_loader.append(event)
        elif cat in ev.GPU_CATEGORIES:
            raw_gpu.append(event)
        elif cat in ev.RUNTIME_CATEGORIES:
            raw_runtime.append(event)
        elif cat in ev.HOST_OP_CATEGORIES:
            if ev.is_profiler_step(event_name):
                raw_steps.append(event)
            elif ev.is_dataloader_next(event_name):
                raw_next.append(event)
            else:
                raw_host.append(event)
                if ev.is_collective(event_name):
                    raw_collectives.append(event)
                if ev.is_backward(event_name):
                    raw_backward.append(event)
                elif ev.is_optimizer(event_name):
                    raw_optimizer.append(event)
                elif event_name in ev.COPY_OPS:
                    copy_ops.append(event)

    main_pid, main_tid = _main_thread(raw_steps, raw_next, raw_host)
    on_main = lambda e: e.get("pid") == main_pid and e.get("tid") == main_tid  # noqa: E731

    steps = []
    for e in raw_steps:
        if on_main(e):
            number = ev.step_number(e["name"])
            steps.append(Step(e["name"], *_span(e), number=number if number is not None else len(steps)))
    steps.sort(key=lambda s: s.start_us)
    next_calls = sorted(
        (NextCall(e["name"], *_span(e), batch=_batch_key(e.get("args", {}))) for e in raw_next if e.get("pid") == main_pid),
        key=lambda s: s.start_us,
    )
    host_ops = sorted((Span(e["name"], *_span(e)) for e in raw_host if on_main(e)), key=lambda s: s.start_us)
    backward = sorted((Span(e["name"], *_span(e)) for e in raw_backward if e.get("pid") == main_pid), key=lambda s: s.start_us)
    optimizer = sorted((Span(e["name"], *_span(e)) for e in raw_optimizer if e.get("pid") == main_pid), key=lambda s: s.start_us)
    # Any thread of the training process: gloo runs a collective on its own threads while the training
    # thread waits for it (DDP's backward ends by waiting for its gradient all-reduce).
    collectives = [Span(ev.collective_kind(e["name"]), *_span(e)) for e in raw_collectives if e.get("pid") == main_pid]

    gpu = []
    h2d_correlations = set()
    for e in raw_gpu:
        args = e.get("args", {})
        cat = ev.category(e)
        kind = "kernel" if cat in ev.KERNEL_CATEGORIES else "memcpy" if cat in ev.MEMCPY_CATEGORIES else "memset"
        h2d = kind == "memcpy" and ev.is_h2d_memcpy(str(e.get("name", "")))
        correlation = args.get("correlation")
        if h2d and correlation is not None:
            h2d_correlations.add(correlation)
        gpu.append(
            GpuActivity(
                str(e.get("name", "")), *_span(e), kind=kind, stream=int(args.get("stream", e.get("tid", 0)) or 0),
                correlation=correlation, h2d=h2d, pinned=h2d and ev.PINNED_MARK in str(e.get("name", "")),
                bytes=int(args.get("bytes", 0) or 0),
            )
        )  # fmt: skip
    gpu.sort(key=lambda g: g.start_us)
    # NCCL's kernels run (and wait for the other ranks) on the GPU.
    collectives += [Span(ev.collective_kind(g.name), g.start_us, g.end_us) for g in gpu if g.kind == "kernel" and ev.is_collective_kernel(g.name)]
    collectives.sort(key=lambda s: s.start_us)
    launches = sorted(
        (Launch(str(e.get("name", "")), *_span(e), correlation=e.get("args", {}).get("correlation"), tid=e.get("tid"))
         for e in raw_runtime if e.get("pid") == main_pid),
        key=lambda s: s.start_us,
    )  # fmt: skip
    # Host copy ops that enclose a runtime memcpy whose device copy was host-to-device.
    h2d_launch_times = [l.start_us for l in launches if ev.is_memcpy_runtime(l.name) and l.correlation in h2d_correlations]
    h2d_host = []
    if h2d_launch_times:
        for e in copy_ops:
            if not on_main(e):
                continue
            start, end = _span(e)
            i = bisect.bisect_left(h2d_launch_times, start)
            if i < len(h2d_launch_times) and h2d_launch_times[i] <= end:
                h2d_host.append(Span(e["name"], start, end))
        h2d_host.sort(key=lambda s: s.start_us)

    loader_spans = []
    for e in raw_loader:
        args = e.get("args", {})
        key = _batch_key(args)
        if key is None:
            continue
        loader_spans.append(
            LoaderSpan(str(e.get("name", "")), *_span(e), pid=int(e.get("pid", 0)), cpu_us=float(args.get(schema.ARG_CPU_US, 0.0)), runq_us=float(args.get(schema.ARG_RUNQ_US, 0.0)), tensors=int(args.get(schema.ARG_TENSORS, 0)),
                       worker=int(args.get(schema.ARG_WORKER, -1)), batch=key)
        )  # fmt: skip
    loader_spans.sort(key=lambda s: s.start_us)
    memory = [
        MemorySample(int(e.get("pid", 0)), float(e["ts"]), float(e.get("args", {}).get("uss_mib", 0)), float(e.get("args", {}).get("pss_mib", 0)))
        for e in raw_memory
    ]
    rank = document.get("distributedInfo", {}).get("rank") if isinstance(document.get("distributedInfo"), dict) else None
    manifest, manifest_problems = parse_manifest(document.get(schema.MANIFEST_KEY))
    return TraceRun(
        name=name, path=path, manifest=manifest, rank=rank, main_pid=main_pid, main_tid=main_tid, steps=steps,
        next_calls=next_calls, host_ops=host_ops, backward=backward, optimizer=optimizer, h2d_host=h2d_host, gpu=gpu,
        launches=launches, loader_spans=loader_spans, memory=memory, collectives=collectives, base_us=_base_us(document),
        process_names=process_names,
        event_count=len(document["traceEvents"]), manifest_problems=manifest_problems,
    )  # fmt: skip


def _base_us(document: dict) -> float:
    try:
        return int(document.get("baseTimeNanoseconds", 0)) / 1000
    except (TypeError, ValueError):
        return 0.0


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def find_traces(path: Path) -> list[list[Path]]:
    """The trace files under ``path``, grouped by run.

    ``path`` may be a trace file, a run directory (its top-level ``.json``/``.json.gz`` files, as HTA
    reads them), or a directory of run directories.

    Raises:
        TraceNotFoundError: nothing that looks like a trace there.
    """
    if path.is_file():
        return [[path]]
    if not path.is_dir():
        raise TraceNotFoundError(f"{path}: no such file or directory; give a run directory (traces/<run>) or a trace file")
    own = sorted(p for p in path.iterdir() if is_trace_file(p))
    if own:
        return [own]
    runs = [sorted(p for p in sub.iterdir() if is_trace_file(p)) for sub in sorted(path.iterdir()) if sub.is_dir()]
    runs = [r for r in runs if r]
    if not runs:
        raise TraceNotFoundError(f"{path}: no trace files (*.json, *.json.gz) here or in its sub-directories; record one with 'dlprof record'")
    return runs


def load_run(trace: Path, name: str | None = None) -> TraceRun:
    """Read and index one trace file."""
    return build_run(read_trace(trace), trace, name or trace.parent.name or trace.name)
