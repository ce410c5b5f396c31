"""The builder: a trace document's events, every field the analysis uses checked once, indexed into a
:class:`~dlprof.trace.run.TraceRun`.

An event with a field of the wrong type or an impossible value is skipped and counted; the counts reach
the report's basis, and nothing downstream re-checks. One pass (:func:`_collect`) checks the events (the
field checks are :mod:`dlprof.trace.checks`) and sorts them by kind, the host ops (9 in 10 events) into
columns; small functions (:mod:`dlprof.trace.assemble`, and the host ops' here) then make each of the run's
lists from what it kept.
"""

from __future__ import annotations

import bisect
import gc
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import compress
from pathlib import Path

import msgspec

from dlprof.core import schema
from dlprof.core.errors import NoStepsError, TraceFormatError
from dlprof.core.manifest import Manifest, parse_manifest
from dlprof.trace import events as ev
from dlprof.trace.assemble import (
    base_us_of,
    by_start_key,
    gpu_activity,
    launches_of,
    loader_spans_of,
    next_calls_of,
    profiler_steps,
    rank_of,
    skipped_lines,
)
from dlprof.trace.checks import (
    NO_ARGS,
    Malformed,
    RawEvent,
    check_args,
    checked_count,
    checked_ident,
    checked_time,
    checked_ts,
    decoded_args,
)
from dlprof.trace.reader import (
    ABSENT,
    Event,
    NotAnEvent,
    TraceEvents,
)
from dlprof.trace.run import (
    MAX_DUR_US,
    MAX_TS_US,
    MIN_STEP_US,
    GpuActivity,
    Launch,
    MemorySample,
    Span,
    TraceRun,
)


def _complete(event: Event, is_step: bool) -> tuple[str, str, float, float, int | str, int | str, dict]:
    """A complete (``ph: X``) event's category, name, start, end, pid, tid and ``args``, checked; ``args`` decoded
    only for the events whose arguments the analysis reads (else :data:`~dlprof.trace.checks.NO_ARGS`)."""
    name = event.name
    if not isinstance(name, str):
        raise Malformed("'name' missing or not a string")
    start = checked_ts(event.ts)
    end = start + checked_time(event.dur, "dur", MAX_DUR_US)
    pid = checked_ident(0 if event.pid is ABSENT else event.pid, "pid")
    tid = checked_ident(event.tid, "tid")
    cat = ev.category_of(event.cat)
    if (
        cat == schema.CATEGORY
        or cat in ev.GPU_CATEGORIES
        or cat in ev.RUNTIME_CATEGORIES
        or (cat in ev.HOST_OP_CATEGORIES and not is_step and ev.is_dataloader_next(name))
    ):
        args = decoded_args(event.args)
    else:
        check_args(event.args)
        args = NO_ARGS
    if is_step and end - start < MIN_STEP_US:
        raise Malformed("a ProfilerStep of zero duration")
    return cat, name, start, end, pid, tid, args


def _metadata_or_counter(event: Event, kept: _Kept) -> int:
    """Keeps a process name (``ph: M``) or a memory sample (``ph: C``): 1 if the event was one, else 0."""
    if event.ph == "M":
        if event.name != "process_name":
            return 0
        name = decoded_args(event.args).get("name", "")
        if isinstance(name, (list, dict)):  # never turned into text: it may nest deeper than ``str`` recurses
            raise Malformed("'args.name' of a process not a string")
        kept.process_names[checked_ident(None if event.pid is ABSENT else event.pid, "pid")] = str(name)
        return 1
    if event.name != schema.MEMORY_COUNTER:
        return 0
    args = decoded_args(event.args)
    kept.memory.append(
        MemorySample(
            checked_count(0 if event.pid is ABSENT else event.pid, "pid"),
            checked_ts(event.ts),
            checked_time(args.get("uss_mib", 0), "args.uss_mib", MAX_DUR_US),
            checked_time(args.get("pss_mib", 0), "args.pss_mib", MAX_DUR_US),
        )
    )
    return 1


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


@dataclass(kw_only=True)
class _Kept:
    """What the pass over the events keeps, by kind, and what it skipped."""

    total: int  # events, usable or not
    steps: list[RawEvent] = field(default_factory=list)  # ProfilerSteps of any thread
    next_calls: list[RawEvent] = field(default_factory=list)  # DataLoader ``__next__`` calls of any thread
    gpu: list[RawEvent] = field(default_factory=list)
    runtime: list[RawEvent] = field(default_factory=list)
    loader: list[RawEvent] = field(default_factory=list)  # dlprof's spans
    memory: list[MemorySample] = field(default_factory=list)
    host: _HostColumns = field(default_factory=_HostColumns)
    process_names: dict[int | str, str] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)  # why -> events skipped as malformed
    used: int = 0  # events kept
    step_events: int = 0  # ProfilerStep events, usable or not


def _main_thread(steps: list[RawEvent], next_calls: list[RawEvent], host: _HostColumns) -> tuple[int | str, int | str]:
    """The (pid, tid) that runs the training loop: where ProfilerStep lives, else most DataLoader waits, else most
    ops."""
    for candidates in (steps, next_calls):
        if candidates:
            (pid, tid), _ = Counter((pid, tid) for _, _, _, pid, tid, _, _ in candidates).most_common(1)[0]
            return pid, tid
    if host.threads:
        return host.thread_ids[Counter(host.threads).most_common(1)[0][0]]
    return -1, -1


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


#: The error of a trace written while its training went on (``--then``) whose recording is no longer open.
TRAINING_OVER = (
    "written while the training went on after its trials, and no recording of this run is open any more: the"
    " training ended (or dlprof record was killed) before its final trace was written; these are the trials' traces"
)


def _training_over(manifest: Manifest | None, run_dir: Path) -> Manifest | None:
    """``manifest``, read as ``partial`` when its status says the training goes on (``training``) but no live
    recording owns ``run_dir`` any more (its final write failed, or its recorder was killed): the status of a trace
    is only believed while the process that will replace it runs."""
    if manifest is None or manifest.status != schema.STATUS_TRAINING:
        return manifest
    if any(owner is not None and owner.alive for owner in schema.scratch_owners(run_dir)):
        return manifest
    return replace(manifest, status=schema.STATUS_PARTIAL, error=TRAINING_OVER)


def _build_run(document: dict, path: Path, name: str, release: bool) -> TraceRun:
    kept = _collect(document["traceEvents"], release)
    _check_usable(kept, path)
    host, skipped = kept.host, kept.skipped
    main_pid, main_tid = _main_thread(kept.steps, kept.next_calls, host)
    # In this order, as the reasons for skipping are listed in the order first met.
    steps, repeated_steps = profiler_steps(kept.steps, main_pid, main_tid)
    gpu, h2d_correlations, repeated_gpu = gpu_activity(kept.gpu, skipped)
    launches = launches_of(kept.runtime, main_pid, skipped)
    loader_spans, repeated_loader = loader_spans_of(kept.loader, skipped)
    manifest, manifest_problems = parse_manifest(document.get(schema.MANIFEST_KEY))
    manifest = _training_over(manifest, path.parent)
    return TraceRun(
        name=name,
        path=path,
        manifest=manifest,
        rank=rank_of(document),
        main_pid=main_pid,
        main_tid=main_tid,
        steps=steps,
        next_calls=next_calls_of(kept.next_calls, main_pid),
        host_ops=host.spans_of(main_pid, main_tid),
        backward=host.spans(host.of(_BACKWARD, main_pid)),
        optimizer=host.spans(host.of(_OPTIMIZER, main_pid)),
        h2d_host=_h2d_host_ops(host, launches, h2d_correlations, main_pid, main_tid),
        gpu=gpu,
        launches=launches,
        loader_spans=loader_spans,
        memory=kept.memory,
        collectives=_collectives(host, gpu, main_pid),
        base_us=base_us_of(document),
        process_names=kept.process_names,
        event_count=kept.total,
        manifest_problems=manifest_problems,
        trace_problems=skipped_lines(skipped, kept.total, repeated_steps + repeated_gpu + repeated_loader),
    )


def _collect(all_events: list | TraceEvents, release: bool) -> _Kept:
    """One pass over the events: each checked, and kept by kind, or skipped and counted."""
    kept = _Kept(total=len(all_events))
    host, skipped = kept.host, kept.skipped
    kinds: dict[str, tuple[str, int, tuple]] = {}  # name -> (the one copy of it kept, _name_kind, host.marks_for(kind))
    used = step_events = 0
    last_pid = last_tid = None  # ops come in runs on one thread
    last_thread = -1
    # Bound once: the fast path below runs for millions of events.
    add_name, add_start, add_end = host.names.append, host.starts.append, host.ends.append
    add_thread, keep_gpu, keep_runtime = host.threads.append, kept.gpu.append, kept.runtime.append
    for event in _events(all_events, drain=release):
        if type(event) is NotAnEvent:
            skipped[str(event)] += 1
            continue
        ph = event.ph
        if ph == "X":
            # The fast path: a well-formed host op, 9 in 10 events of a real trace. It takes only events that
            # the checks below would pass unchanged, and does with them what they would; the rest go there.
            name, cat, ts, dur, pid, tid, args = (
                event.name,
                event.cat,
                event.ts,
                event.dur,
                event.pid,
                event.tid,
                event.args,
            )
            if (
                type(name) is str
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
                name, kind, marks = kinds.get(name) or _learn(kinds, name, host)
                if kind:  # a plain op (not a ProfilerStep or DataLoader call)
                    start = ts if type(ts) is float else float(ts)
                    used += 1
                    if pid != last_pid or tid != last_tid:
                        last_pid, last_tid, last_thread = pid, tid, host.thread(pid, tid)
                    for positions in marks:
                        positions.append(len(host.names))
                    add_name(name)
                    add_start(start)
                    add_end(start + dur)
                    add_thread(last_thread)
                    continue
        try:
            if ph != "X":
                if ph == "M" or ph == "C":
                    used += _metadata_or_counter(event, kept)
                continue
            is_step = type(event.name) is str and ev.is_profiler_step(event.name)
            step_events += is_step
            cat, name, start, end, pid, tid, args = _complete(event, is_step)
        except Malformed as malformed:
            skipped[str(malformed)] += 1
            continue
        used += 1
        name, _, marks = kinds.get(name) or _learn(kinds, name, host)
        if cat == schema.CATEGORY:
            kept.loader.append((name, start, end, pid, tid, args, ""))
        elif cat in ev.GPU_CATEGORIES:
            keep_gpu((name, start, end, pid, tid, _subset(args, GPU_ARGS), cat))
        elif cat in ev.RUNTIME_CATEGORIES:
            keep_runtime((name, start, end, pid, tid, _subset(args, RUNTIME_ARGS), ""))
        elif cat in HOST_OP_CATEGORIES:
            if is_step:
                kept.steps.append((name, start, end, pid, tid, NO_ARGS, ""))
            elif ev.is_dataloader_next(name):
                kept.next_calls.append((name, start, end, pid, tid, args, ""))
            else:
                host.add(name, start, end, pid, tid, marks)
    kept.used, kept.step_events = used, step_events
    return kept


def _learn(kinds: dict[str, tuple[str, int, tuple]], name: str, host: _HostColumns) -> tuple[str, int, tuple]:
    """What an event's name makes it, noted in ``kinds`` the first time the name is met."""
    kind = _name_kind(name)
    known = kinds[name] = (name, kind, host.marks_for(kind))
    return known


def _check_usable(kept: _Kept, path: Path) -> None:
    """Refuses a trace whose events, or whose ProfilerSteps, are all unusable."""
    if not kept.used and kept.skipped:
        raise TraceFormatError(
            f"{path}: none of its {kept.total} events is usable ({skipped_lines(kept.skipped, kept.total, 0)[0]});"
            " give a trace written by torch.profiler"
        )
    if kept.step_events and not kept.steps:
        raise NoStepsError(
            f"{path}: none of its {kept.step_events} ProfilerStep events is usable (malformed or of zero duration);"
            " record the trace again"
        )


def _h2d_host_ops(
    host: _HostColumns, launches: list[Launch], h2d_correlations: set, main_pid: int | str, main_tid: int | str
) -> list[Span]:
    """The training thread's host copy ops that enclose a runtime memcpy whose device copy was host-to-device."""
    h2d_launch_times = [
        launch.start_us
        for launch in launches
        if ev.is_memcpy_runtime(launch.name) and launch.correlation in h2d_correlations
    ]
    if not h2d_launch_times:
        return []
    h2d_host = []
    for op in host.spans(host.of(_COPY, main_pid, main_tid), by_start=False):
        i = bisect.bisect_left(h2d_launch_times, op.start_us)
        if i < len(h2d_launch_times) and h2d_launch_times[i] <= op.end_us:
            h2d_host.append(op)
    h2d_host.sort(key=by_start_key)
    return h2d_host


def _collectives(host: _HostColumns, gpu: list[GpuActivity], main_pid: int | str) -> list[Span]:
    """The training process's collectives by start, named by kind."""
    # Any thread of the training process: gloo runs a collective on its own threads while the training
    # thread waits for it (DDP's backward ends by waiting for its gradient all-reduce).
    collectives = [
        Span(ev.collective_kind(s.name), s.start_us, s.end_us)
        for s in host.spans(host.of(_COLLECTIVE, main_pid), by_start=False)
    ]
    # NCCL's kernels run (and wait for the other ranks) on the GPU.
    collectives += [
        Span(ev.collective_kind(g.name), g.start_us, g.end_us)
        for g in gpu
        if g.kind == "kernel" and ev.is_collective_kernel(g.name)
    ]
    collectives.sort(key=by_start_key)
    return collectives
