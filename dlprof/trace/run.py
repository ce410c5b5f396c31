"""A run: its trace file, manifest and the events the analysis needs, indexed once.

Times stay in the trace's own unit, microseconds on the trace's clock (``ts``): relative to
``baseTimeNanoseconds`` on current Kineto traces, absolute Unix µs on old ones. Only differences are
ever used, so both work.
"""

from __future__ import annotations

import bisect
import gc
import math
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path

import msgspec

from dlprof import schema
from dlprof.errors import NoStepsError, TraceFormatError, TraceNotFoundError, printable
from dlprof.manifest import Manifest, parse_manifest
from dlprof.trace import events as ev
from dlprof.trace.reader import (
    ABSENT,
    Event,
    NotAnEvent,
    Progress,
    TraceEvents,
    decode_raw,
    is_raw,
    parse_trace,
    raw_is_object,
    read_bytes,
)

TRACE_SUFFIXES = (".json", ".json.gz")
#: What torch.profiler's tensorboard_trace_handler (and dlprof) names a trace.
PROFILER_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


class Span(msgspec.Struct, frozen=True, gc=False):
    """A complete event: ``[start_us, end_us)`` on the trace clock.

    The spans are frozen msgspec structs, not dataclasses: a 1 GB trace makes ~5 million of them, which
    a struct builds 7 x faster (0.16 against 1.1 µs each) in 40 bytes instead of 56; they hold no
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
    correlation: int | None
    h2d: bool = False
    pinned: bool = False
    bytes: int = 0


class Launch(Span, frozen=True, gc=False):
    """A runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) with its correlation id."""

    correlation: int | None
    tid: int


class MemorySample(msgspec.Struct, frozen=True, gc=False):
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
    #: What was wrong with the events (malformed ones skipped, duplicates counted once), for the report's basis.
    trace_problems: tuple[str, ...] = ()

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


class _Malformed(Exception):
    """An event field of the wrong type or an impossible value; the message names the field."""


def _time(value: object, field_name: str, limit: float, signed: bool = False) -> float:
    """A finite number no larger than ``limit`` in magnitude, and non-negative unless ``signed``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed(f"'{field_name}' not a number")
    try:
        number = float(value)
    except OverflowError:
        raise _Malformed(f"'{field_name}' too large") from None
    if not math.isfinite(number) or abs(number) > limit or (number < 0 and not signed):
        raise _Malformed(
            f"'{field_name}' {'non-finite or too large' if signed else 'negative, non-finite or too large'}"
        )
    return number


def _ts(value: object) -> float:
    # Signed: ts count from baseTimeNanoseconds, and dlprof merges worker spans that began before it.
    return _time(value, "ts", MAX_TS_US, signed=True)


def _count(value: object, field_name: str, limit: int = MAX_COUNT, signed: bool = False) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > limit or (value < 0 and not signed):
        raise _Malformed(f"'{field_name}' not a valid count")
    return value


def _ident(value: object, field_name: str) -> int | str:
    """A pid or tid: an int or a string (old traces write ``"tid": "25738"`` or ``"stream 7"``)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _Malformed(f"'{field_name}' not an int or string")


def _correlation(value: object) -> int | str | None:
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _Malformed("'args.correlation' not an int or string")


def _args(args: object) -> dict:
    """An event's ``args``, decoded if still raw: an object, or ``{}`` when absent."""
    if args is ABSENT:
        return {}
    if is_raw(args):
        try:
            args = decode_raw(args)
        except msgspec.DecodeError:  # valid JSON (the split checked it), so a number beyond a double
            raise _Malformed("'args' holding a number beyond a double") from None
    if not isinstance(args, dict):
        raise _Malformed("'args' not an object")
    return args


def _check_args(args: object) -> None:
    """That ``args`` is an object (or absent), without decoding it: most events' arguments are never read."""
    if args is not ABSENT and not (raw_is_object(args) if is_raw(args) else isinstance(args, dict)):
        raise _Malformed("'args' not an object")


def _complete(event: Event) -> tuple[str, float, float, int | str, int | str]:
    """A complete (``ph: X``) event's name, start, end, pid and tid, checked (its ``args`` are checked by the
    caller)."""
    name = event.name
    if not isinstance(name, str):
        raise _Malformed("'name' missing or not a string")
    start = _ts(event.ts)
    duration = _time(event.dur, "dur", MAX_DUR_US)
    return (
        name,
        start,
        start + duration,
        _ident(0 if event.pid is ABSENT else event.pid, "pid"),
        _ident(event.tid, "tid"),
    )


def _events(events: Iterable, drain: bool = False) -> Iterator[Event | NotAnEvent]:
    """The events of a document read by :func:`read_trace` (decoded one at a time; with ``drain``, each raw
    event let go once decoded) or built in memory (dicts)."""
    if isinstance(events, TraceEvents):
        return events.drain() if drain else iter(events)
    return (Event.from_dict(event) if isinstance(event, dict) else NotAnEvent("not an object") for event in events)


#: Arguments kept from GPU activity and runtime calls (a kernel's ``args`` hold a dozen more).
GPU_ARGS = ("stream", "correlation", "bytes")
RUNTIME_ARGS = ("correlation",)


def _subset(args: dict, keys: tuple[str, ...]) -> dict:
    return {k: args[k] for k in keys if k in args}


#: What a host op's name makes it (bit flags; a name is classified once, however many ops bear it).
_PLAIN_OP, _COLLECTIVE, _BACKWARD, _OPTIMIZER, _COPY = 1, 2, 4, 8, 16
HOST_OP_CATEGORIES = ev.HOST_OP_CATEGORIES
Raw = msgspec.Raw


def _name_kind(name: str) -> int:
    """0 for a ProfilerStep or a DataLoader ``__next__`` call, else ``_PLAIN_OP`` with what else the op is."""
    if ev.is_profiler_step(name) or ev.is_dataloader_next(name):
        return 0
    kind = _PLAIN_OP | (_COLLECTIVE if ev.is_collective(name) else 0)
    if ev.is_backward(name):
        return kind | _BACKWARD
    if ev.is_optimizer(name):
        return kind | _OPTIMIZER
    return kind | (_COPY if name in ev.COPY_OPS else 0)


class _HostColumns:
    """Host ops of every thread, in columns (the training thread is known only once all events are read),
    and the positions of the backward, optimizer, copy and collective ops among them."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.starts = array("d")
        self.ends = array("d")
        self.threads = array("i")  # index into ``thread_ids``
        self.thread_index: dict[tuple[int | str, int | str], int] = {}
        self.thread_ids: list[tuple[int | str, int | str]] = []
        self.marked: dict[int, array] = {flag: array("q") for flag in (_COLLECTIVE, _BACKWARD, _OPTIMIZER, _COPY)}

    def thread(self, pid: int | str, tid: int | str) -> int:
        key = (pid, tid)
        index = self.thread_index.get(key)
        if index is None:
            index = self.thread_index[key] = len(self.thread_ids)
            self.thread_ids.append(key)
        return index

    def marks_for(self, kind: int) -> tuple[array, ...]:
        """Where to note the position of an op of ``kind``: the lists of the flags it has."""
        return tuple(positions for flag, positions in self.marked.items() if kind & flag)

    def add(
        self, name: str, start: float, end: float, pid: int | str, tid: int | str, marks: tuple[array, ...]
    ) -> None:
        for positions in marks:
            positions.append(len(self.names))
        self.names.append(name)
        self.starts.append(start)
        self.ends.append(end)
        self.threads.append(self.thread(pid, tid))

    def of(self, flag: int, pid: int | str, tid: int | str | None = None) -> list[int]:
        """Positions of the ops marked ``flag`` on process ``pid`` (and thread ``tid``, if given)."""
        wanted = {i for i, (p, t) in enumerate(self.thread_ids) if p == pid and (tid is None or t == tid)}
        threads = self.threads
        return [i for i in self.marked[flag] if threads[i] in wanted]

    def spans(self, positions: Iterable[int], by_start: bool = True) -> list[Span]:
        """The ops at ``positions`` as spans, sorted by start (stably) unless not ``by_start``."""
        if by_start:
            positions = sorted(positions, key=self.starts.__getitem__)
        names, starts, ends = self.names, self.starts, self.ends
        return [Span(names[i], starts[i], ends[i]) for i in positions]

    def spans_of(self, pid: int | str, tid: int | str) -> list[Span]:
        """The ops of one thread as spans, sorted by start."""
        index = self.thread_index.get((pid, tid))
        if index is None:
            return []
        if len(self.thread_ids) == 1:
            return self.spans(range(len(self.names)))
        return self.spans(compress(range(len(self.threads)), map(index.__eq__, self.threads)))


def _stream(args: dict, tid: int | str) -> int:
    """The GPU stream: ``args.stream``, else the tid (``7`` or old traces' ``"stream 7"``)."""
    if "stream" in args:
        return _count(args["stream"], "args.stream")
    if isinstance(tid, int):
        return tid
    digits = tid.rsplit(" ", 1)[-1]
    return int(digits) if digits.isdigit() and len(digits) < 16 else 0


def _main_thread(steps: list[tuple], next_events: list[tuple], host: _HostColumns) -> tuple[int | str, int | str]:
    """The (pid, tid) that runs the training loop: where ProfilerStep lives, else most DataLoader waits, else most
    ops."""
    for candidates in (steps, next_events):
        if candidates:
            (pid, tid), _ = Counter((e[3], e[4]) for e in candidates).most_common(1)[0]
            return pid, tid
    if host.threads:
        return host.thread_ids[Counter(host.threads).most_common(1)[0][0]]
    return -1, -1


def _batch_key(args: dict) -> tuple[int, int, int] | None:
    """(loader, epoch, batch) of a dlprof span or ``__next__`` call; None when absent or malformed."""
    try:
        return (
            _count(args[schema.ARG_LOADER], "loader"),
            _count(args[schema.ARG_EPOCH], "epoch"),
            _count(args[schema.ARG_BATCH], "batch"),
        )
    except (KeyError, _Malformed):
        return None


def _skipped_lines(skipped: Counter, total: int, duplicates: int) -> tuple[str, ...]:
    """What validation left out, for the report's basis."""
    lines = []
    if skipped:
        count = sum(skipped.values())
        why = ", ".join(f"{n} with {reason}" for reason, n in skipped.most_common())
        lines.append(f"{count} of {total} trace events skipped as malformed ({why})")
    if duplicates:
        lines.append(f"{duplicates} duplicated events (same name, thread, start and duration) counted once")
    return tuple(lines)


def build_run(document: dict, path: Path, name: str, release: bool = False) -> TraceRun:
    """Index the events of one trace document, checking every field the analysis uses.

    An event with a field of the wrong type or an impossible value (negative or non-finite time,
    negative bytes, an id that is not an int or string) is skipped and counted: the counts reach the
    report's basis (``TraceRun.trace_problems``), and nothing downstream re-checks.

    ``document["traceEvents"]`` is a list of dicts, or the :class:`~dlprof.trace.reader.TraceEvents` of
    :func:`~dlprof.trace.reader.read_trace`, decoded one event at a time; only what the analysis needs is
    kept. With ``release``, each raw event is let go once read, and with the last of them the file's buffer.

    Raises:
        TraceFormatError: the trace has events, but none of them is usable.
        NoStepsError: it has ProfilerStep events, but none of them is usable.
    """
    enabled = gc.isenabled()
    gc.disable()  # millions of small objects, no cycles: the cyclic GC would rescan them again and again
    try:
        return _build_run(document, path, name, release)
    finally:
        if enabled:
            gc.enable()


def _build_run(document: dict, path: Path, name: str, release: bool) -> TraceRun:
    raw_steps, raw_next, raw_gpu, raw_runtime, raw_loader, raw_memory = [], [], [], [], [], []
    host = _HostColumns()
    process_names: dict[int | str, str] = {}
    skipped: Counter = Counter()
    used = step_events = 0
    all_events = document["traceEvents"]
    total = len(all_events)
    kinds: dict[str, tuple[str, int, tuple]] = {}  # name -> (the one copy of it kept, _name_kind, host.marks_for(kind))
    last_pid = last_tid = None  # ops come in runs on one thread
    last_thread = -1
    # Bound once: the fast path below runs for millions of events.
    add_name, add_start, add_end, add_thread = (
        host.names.append,
        host.starts.append,
        host.ends.append,
        host.threads.append,
    )
    for event in _events(all_events, drain=release):
        if type(event) is NotAnEvent:
            skipped[str(event)] += 1
            continue
        ph = event.ph
        if ph == "X":
            # The fast path: a well-formed host op, 9 in 10 events of a real trace. It takes only events that
            # the checks below would pass unchanged, and does with them what they would; the rest go there.
            event_name, cat, ts, dur, pid, tid, args = (
                event.name,
                event.cat,
                event.ts,
                event.dur,
                event.pid,
                event.tid,
                event.args,
            )
            if (
                type(event_name) is str
                and type(cat) is str
                and cat.lower() in HOST_OP_CATEGORIES
                and (type(ts) is float or type(ts) is int)
                and -MAX_TS_US <= ts <= MAX_TS_US
                and (type(dur) is float or type(dur) is int)
                and 0 <= dur <= MAX_DUR_US
                and (type(pid) is int or type(pid) is str)
                and (type(tid) is int or type(tid) is str)
                and (args is ABSENT or (type(args) is Raw and memoryview(args)[0] == 0x7B) or type(args) is dict)
            ):
                known = kinds.get(event_name)
                if known is None:
                    kind = _name_kind(event_name)
                    known = kinds[event_name] = (event_name, kind, host.marks_for(kind))
                event_name, kind, marks = known
                if kind:  # a plain op (not a ProfilerStep or DataLoader call)
                    start = ts if type(ts) is float else float(ts)
                    used += 1
                    if pid != last_pid or tid != last_tid:
                        last_pid, last_tid, last_thread = pid, tid, host.thread(pid, tid)
                    for positions in marks:
                        positions.append(len(host.names))
                    add_name(event_name)
                    add_start(start)
                    add_end(start + dur)
                    add_thread(last_thread)
                    continue
        try:
            if ph == "M":
                if event.name == "process_name":
                    process_names[_ident(None if event.pid is ABSENT else event.pid, "pid")] = str(
                        _args(event.args).get("name", "")
                    )
                    used += 1
                continue
            if ph == "C":
                if event.name == schema.MEMORY_COUNTER:
                    args = _args(event.args)
                    raw_memory.append(
                        MemorySample(
                            _count(0 if event.pid is ABSENT else event.pid, "pid"),
                            _ts(event.ts),
                            _time(args.get("uss_mib", 0), "args.uss_mib", MAX_DUR_US),
                            _time(args.get("pss_mib", 0), "args.pss_mib", MAX_DUR_US),
                        )
                    )
                    used += 1
                continue
            if ph != "X":
                continue
            cat = ev.category_of(event.cat)
            is_step = ev.is_profiler_step(str(event.name))
            step_events += is_step
            event_name, start, end, pid, tid = _complete(event)
            if (
                cat == schema.CATEGORY
                or cat in ev.GPU_CATEGORIES
                or cat in ev.RUNTIME_CATEGORIES
                or (cat in ev.HOST_OP_CATEGORIES and not is_step and ev.is_dataloader_next(event_name))
            ):
                args = _args(event.args)
            else:
                _check_args(event.args)
                args = None
            if is_step and end - start < MIN_STEP_US:
                raise _Malformed("a ProfilerStep of zero duration")
        except _Malformed as malformed:
            skipped[str(malformed)] += 1
            continue
        used += 1
        known = kinds.get(event_name)
        if known is None:
            kind = _name_kind(event_name)
            known = kinds[event_name] = (event_name, kind, host.marks_for(kind))
        event_name = known[0]
        if cat == schema.CATEGORY:
            raw_loader.append((event_name, start, end, pid, tid, args))
        elif cat in ev.GPU_CATEGORIES:
            raw_gpu.append((event_name, start, end, pid, tid, _subset(args, GPU_ARGS), cat))
        elif cat in ev.RUNTIME_CATEGORIES:
            raw_runtime.append((event_name, start, end, pid, tid, _subset(args, RUNTIME_ARGS)))
        elif cat in ev.HOST_OP_CATEGORIES:
            e = (event_name, start, end, pid, tid, None)
            if is_step:
                raw_steps.append(e)
            elif ev.is_dataloader_next(event_name):
                raw_next.append((event_name, start, end, pid, tid, args))
            else:
                host.add(event_name, start, end, pid, tid, known[2])
    event = None  # its raw args would keep the whole buffer alive
    if not used and skipped:
        raise TraceFormatError(
            f"{path}: none of its {total} events is usable ({_skipped_lines(skipped, total, 0)[0]}); give a trace"
            " written by torch.profiler"
        )
    if step_events and not raw_steps:
        raise NoStepsError(
            f"{path}: none of its {step_events} ProfilerStep events is usable (malformed or of zero duration); record"
            " the trace again"
        )

    main_pid, main_tid = _main_thread(raw_steps, raw_next, host)
    on_main = lambda e: e[3] == main_pid and e[4] == main_tid
    duplicates = 0

    def distinct(events: list[tuple]) -> list[tuple]:
        """Events once each: a trace merged or exported twice repeats them (same name, thread, start, end, args)."""
        nonlocal duplicates
        seen, kept = set(), []
        for e in events:
            key = (e[0], e[1], e[2], e[3], e[4])
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            kept.append(e)
        return kept

    steps = []
    for e in distinct([e for e in raw_steps if on_main(e)]):
        number = ev.step_number(e[0])
        steps.append(
            Step(e[0], e[1], e[2], number=number if number is not None and 0 <= number <= MAX_COUNT else len(steps))
        )
    steps.sort(key=lambda s: s.start_us)
    next_calls = sorted(
        (NextCall(e[0], e[1], e[2], batch=_batch_key(e[5])) for e in raw_next if e[3] == main_pid),
        key=lambda s: s.start_us,
    )
    host_ops = host.spans_of(main_pid, main_tid)
    backward = host.spans(host.of(_BACKWARD, main_pid))
    optimizer = host.spans(host.of(_OPTIMIZER, main_pid))
    # Any thread of the training process: gloo runs a collective on its own threads while the training
    # thread waits for it (DDP's backward ends by waiting for its gradient all-reduce).
    collectives = [
        Span(ev.collective_kind(s.name), s.start_us, s.end_us)
        for s in host.spans(host.of(_COLLECTIVE, main_pid), by_start=False)
    ]

    gpu = []
    h2d_correlations = set()
    for e in distinct(raw_gpu):
        event_name, start, end, pid, tid, args = e[:6]
        try:
            stream = _stream(args, tid)
            correlation = _correlation(args.get("correlation"))
            size = _count(args.get("bytes", 0) or 0, "args.bytes", MAX_COPY_BYTES)
        except _Malformed as malformed:
            skipped[str(malformed)] += 1
            continue
        cat = e[6]
        cat_kind = "kernel" if cat in ev.KERNEL_CATEGORIES else "memcpy" if cat in ev.MEMCPY_CATEGORIES else "memset"
        h2d = cat_kind == "memcpy" and ev.is_h2d_memcpy(event_name)
        if h2d and correlation is not None:
            h2d_correlations.add(correlation)
        gpu.append(
            GpuActivity(
                event_name,
                start,
                end,
                kind=cat_kind,
                stream=stream,
                correlation=correlation,
                h2d=h2d,
                pinned=h2d and ev.PINNED_MARK in event_name,
                bytes=size,
            )
        )
    gpu.sort(key=lambda g: g.start_us)
    # NCCL's kernels run (and wait for the other ranks) on the GPU.
    collectives += [
        Span(ev.collective_kind(g.name), g.start_us, g.end_us)
        for g in gpu
        if g.kind == "kernel" and ev.is_collective_kernel(g.name)
    ]
    collectives.sort(key=lambda s: s.start_us)
    launches = []
    for e in raw_runtime:
        if e[3] != main_pid:
            continue
        try:
            launches.append(Launch(e[0], e[1], e[2], correlation=_correlation(e[5].get("correlation")), tid=e[4]))
        except _Malformed as malformed:
            skipped[str(malformed)] += 1
    launches.sort(key=lambda s: s.start_us)
    # Host copy ops that enclose a runtime memcpy whose device copy was host-to-device.
    h2d_launch_times = [
        launch.start_us
        for launch in launches
        if ev.is_memcpy_runtime(launch.name) and launch.correlation in h2d_correlations
    ]
    h2d_host = []
    if h2d_launch_times:
        for e in host.spans(host.of(_COPY, main_pid, main_tid), by_start=False):
            start, end = e.start_us, e.end_us
            i = bisect.bisect_left(h2d_launch_times, start)
            if i < len(h2d_launch_times) and h2d_launch_times[i] <= end:
                h2d_host.append(e)
        h2d_host.sort(key=lambda s: s.start_us)

    loader_spans = []
    for e in distinct(raw_loader):
        args = e[5]
        key = _batch_key(args)
        if key is None:
            continue
        try:
            span = LoaderSpan(
                e[0],
                e[1],
                e[2],
                pid=_count(e[3], "pid"),
                cpu_us=_time(args.get(schema.ARG_CPU_US, 0.0), "args.cpu_us", MAX_DUR_US),
                runq_us=_time(args.get(schema.ARG_RUNQ_US, 0.0), "args.runq_us", MAX_DUR_US),
                tensors=_count(args.get(schema.ARG_TENSORS, 0), "args.tensors"),
                worker=_count(args.get(schema.ARG_WORKER, -1), "args.worker", signed=True),
                batch=key,
            )
        except _Malformed as malformed:
            skipped[str(malformed)] += 1
            continue
        loader_spans.append(span)
    loader_spans.sort(key=lambda s: s.start_us)
    info = document.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_COUNT:
        rank = None
    manifest, manifest_problems = parse_manifest(document.get(schema.MANIFEST_KEY))
    return TraceRun(
        name=name,
        path=path,
        manifest=manifest,
        rank=rank,
        main_pid=main_pid,
        main_tid=main_tid,
        steps=steps,
        next_calls=next_calls,
        host_ops=host_ops,
        backward=backward,
        optimizer=optimizer,
        h2d_host=h2d_host,
        gpu=gpu,
        launches=launches,
        loader_spans=loader_spans,
        memory=raw_memory,
        collectives=collectives,
        base_us=_base_us(document),
        process_names=process_names,
        event_count=total,
        manifest_problems=manifest_problems,
        trace_problems=_skipped_lines(skipped, total, duplicates),
    )


def _base_us(document: dict) -> float:
    """``baseTimeNanoseconds`` in µs; 0 when absent (old traces: absolute ``ts``) or malformed."""
    base = document.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base <= 2**63:
        return 0.0
    return base / 1000


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def is_profiler_trace_name(path: Path) -> bool:
    """Named as torch.profiler's ``tensorboard_trace_handler`` (and dlprof) name traces: ``*.pt.trace.json[.gz]``."""
    return path.name.endswith(PROFILER_TRACE_SUFFIXES)


def display(path: Path | str) -> str:
    """A path as text that can always be printed: bytes that are not UTF-8 (a run named on another system) replaced."""
    return printable(os.fsdecode(path))


def _run_files(directory: Path) -> list[Path]:
    """A run directory's traces: its ``*.pt.trace.json[.gz]`` files when it has any, else its ``.json``/``.json.gz``
    files.

    With profiler-named traces there, other JSON files (a report written with ``-o``, notes) are not
    taken for traces; without, they are candidates that the reader skips when they are not traces.
    """
    files = sorted(p for p in directory.iterdir() if is_trace_file(p))
    named = [p for p in files if is_profiler_trace_name(p)]
    return named or files


def _being_recorded(run_dir: Path) -> str | None:
    """Why ``run_dir`` holds no trace yet, when ``dlprof record`` has (or had) it open; else None."""
    scratch = run_dir / schema.SCRATCH_DIR
    if not scratch.is_dir():
        return None
    pid = schema.scratch_owner(scratch)
    if pid is None:
        return "holds only the scratch files of a record that did not finish; record it again"
    return f"is still being recorded (dlprof record, pid {pid}); analyze it once that has finished"


def find_runs(path: Path) -> tuple[list[list[Path]], list[tuple[Path, str]]]:
    """The trace files under ``path``, grouped by run, and the sub-directories that could not be listed (and why).

    ``path`` may be a trace file, a run directory (its top-level trace files, as HTA reads them), or a
    directory of run directories.

    Raises:
        TraceNotFoundError: nothing that looks like a trace there, or ``path`` cannot be listed.
    """
    if path.is_file():
        return [[path]], []
    if not path.is_dir():
        raise TraceNotFoundError(
            f"{display(path)}: no such file or directory; give a run directory (traces/<run>) or a trace file"
        )
    try:
        own = _run_files(path)
        subs = sorted(sub for sub in path.iterdir() if sub.is_dir()) if not own else []
    except OSError as error:
        raise TraceNotFoundError(f"{display(path)}: cannot list it ({error.strerror}); check its permissions") from None
    if own:
        return [own], []
    recording = _being_recorded(path)
    if recording:
        raise TraceNotFoundError(f"{display(path)}: {recording}")
    runs, unreadable = [], []
    for sub in subs:
        try:
            files = _run_files(sub)
        except OSError as error:
            unreadable.append((sub, f"cannot list it ({error.strerror}); check its permissions"))
            continue
        if files:
            runs.append(files)
        elif recording := _being_recorded(sub):
            unreadable.append((sub, recording))
    if not runs:
        why = f" ({display(unreadable[0][0])}: {unreadable[0][1]})" if unreadable else ""
        raise TraceNotFoundError(
            f"{display(path)}: no trace files (*.json, *.json.gz) here or in its sub-directories{why}; record one with"
            " 'dlprof record'"
        )
    return runs, unreadable


def find_traces(path: Path) -> list[list[Path]]:
    """The trace files under ``path``, grouped by run (see :func:`find_runs`).

    Raises:
        TraceNotFoundError: nothing that looks like a trace there.
    """
    return find_runs(path)[0]


def load_run(trace: Path, name: str | None = None) -> TraceRun:
    """Read and index one trace file (a line on stderr when that takes more than a couple of seconds)."""
    try:
        size = f" ({trace.stat().st_size / 1e6:,.0f} MB)" if trace.is_file() else ""
    except OSError:
        size = ""
    with Progress(f"reading trace {display(trace)}{size}") as progress:
        text = read_bytes(trace)
        size_mb = len(text) / 1e6
        document = parse_trace(trace, text)
        del text  # the raw events hold the buffer until build_run lets them go
        run = build_run(document, trace, display(name or trace.parent.name or trace.name), release=True)
        progress.done(f"{size_mb:,.0f} MB of JSON, {run.event_count / 1e6:.1f} M events")
    return run
