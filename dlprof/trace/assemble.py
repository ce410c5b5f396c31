"""The run's lists, each made from the events the builder's pass kept (:mod:`dlprof.trace.build`): the training
thread's ProfilerSteps, its DataLoader calls, the GPU activity, the runtime calls and dlprof's loader spans, each by
start with repeated events counted once; the rank and clock base of the document; and the lines that say what was
skipped.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter

from dlprof.core import schema
from dlprof.trace import events as ev
from dlprof.trace.checks import (
    ARGS,
    PID,
    TID,
    Malformed,
    RawEvent,
    batch_key,
    checked_correlation,
    checked_count,
    checked_time,
    stream_of,
)
from dlprof.trace.run import MAX_COPY_BYTES, MAX_COUNT, MAX_DUR_US, GpuActivity, Launch, LoaderSpan, NextCall, Step


def skipped_lines(skipped: Counter, total: int, duplicates: int) -> tuple[str, ...]:
    """What validation left out, for the report's basis."""
    lines = []
    if skipped:
        count = sum(skipped.values())
        why = ", ".join(f"{n} with {reason}" for reason, n in skipped.most_common())
        lines.append(f"{count} of {total} trace events skipped as malformed ({why})")
    if duplicates:
        lines.append(f"{duplicates} duplicated events (same name, thread, start and duration) counted once")
    return tuple(lines)


#: Every list of spans is sorted by start (stably: spans that start together keep the trace's order).
by_start_key = attrgetter("start_us")


def once_each(events: list[RawEvent]) -> tuple[list[RawEvent], int]:
    """The events once each, and how many repeats were dropped: a trace merged or exported twice repeats them
    (same name, start, end and thread)."""
    seen, kept = set(), []
    for e in events:
        key = e[:ARGS]  # name, start, end, pid and tid
        if key in seen:
            continue
        seen.add(key)
        kept.append(e)
    return kept, len(events) - len(kept)


def profiler_steps(raw: list[RawEvent], main_pid: int | str, main_tid: int | str) -> tuple[list[Step], int]:
    """The training thread's ProfilerSteps by start, numbered as named (else by position), and the repeats dropped."""
    on_main, repeats = once_each([e for e in raw if e[PID] == main_pid and e[TID] == main_tid])
    steps: list[Step] = []
    for name, start, end, _pid, _tid, _args, _cat in on_main:
        number = ev.step_number(name)
        if number is None or not 0 <= number <= MAX_COUNT:
            number = len(steps)  # unnamed or out of range: numbered by position
        steps.append(Step(name, start, end, number=number))
    steps.sort(key=by_start_key)
    return steps, repeats


def next_calls_of(raw: list[RawEvent], main_pid: int | str) -> list[NextCall]:
    """The training process's DataLoader ``__next__`` calls by start, with the batch dlprof linked them to."""
    calls = [
        NextCall(name, start, end, batch=batch_key(args))
        for name, start, end, pid, _tid, args, _cat in raw
        if pid == main_pid
    ]
    calls.sort(key=by_start_key)
    return calls


def gpu_activity(raw: list[RawEvent], skipped: Counter) -> tuple[list[GpuActivity], set, int]:
    """Kernels, copies and memsets by start; the correlation ids of the host-to-device copies; the repeats
    dropped."""
    distinct, repeats = once_each(raw)
    gpu = []
    h2d_correlations = set()
    for name, start, end, _pid, tid, args, cat in distinct:
        try:
            stream = stream_of(args, tid)
            correlation = checked_correlation(args.get("correlation"))
            size = checked_count(args.get("bytes", 0) or 0, "args.bytes", MAX_COPY_BYTES)
        except Malformed as malformed:
            skipped[str(malformed)] += 1
            continue
        kind = "kernel" if cat in ev.KERNEL_CATEGORIES else "memcpy" if cat in ev.MEMCPY_CATEGORIES else "memset"
        h2d = kind == "memcpy" and ev.is_h2d_memcpy(name)
        if h2d and correlation is not None:
            h2d_correlations.add(correlation)
        pinned = h2d and ev.PINNED_MARK in name
        gpu.append(
            GpuActivity(
                name, start, end, kind=kind, stream=stream, correlation=correlation, h2d=h2d, pinned=pinned, bytes=size
            )
        )
    gpu.sort(key=by_start_key)
    return gpu, h2d_correlations, repeats


def launches_of(raw: list[RawEvent], main_pid: int | str, skipped: Counter) -> list[Launch]:
    """The training process's runtime calls by start."""
    launches = []
    for name, start, end, pid, tid, args, _cat in raw:
        if pid != main_pid:
            continue
        try:
            launches.append(Launch(name, start, end, correlation=checked_correlation(args.get("correlation")), tid=tid))
        except Malformed as malformed:
            skipped[str(malformed)] += 1
    launches.sort(key=by_start_key)
    return launches


def loader_spans_of(raw: list[RawEvent], skipped: Counter) -> tuple[list[LoaderSpan], int]:
    """dlprof's spans of the loader processes that name their batch, by start, and the repeats dropped."""
    distinct, repeats = once_each(raw)
    spans = []
    for name, start, end, pid, _tid, args, _cat in distinct:
        key = batch_key(args)
        if key is None:
            continue
        try:
            span = LoaderSpan(
                name,
                start,
                end,
                pid=checked_count(pid, "pid"),
                cpu_us=checked_time(args.get(schema.ARG_CPU_US, 0.0), "args.cpu_us", MAX_DUR_US),
                runq_us=checked_time(args.get(schema.ARG_RUNQ_US, 0.0), "args.runq_us", MAX_DUR_US),
                tensors=checked_count(args.get(schema.ARG_TENSORS, 0), "args.tensors"),
                worker=checked_count(args.get(schema.ARG_WORKER, -1), "args.worker", signed=True),
                batch=key,
            )
        except Malformed as malformed:
            skipped[str(malformed)] += 1
            continue
        spans.append(span)
    spans.sort(key=by_start_key)
    return spans, repeats


def rank_of(document: dict) -> int | None:
    """``distributedInfo.rank``; None when absent or malformed."""
    info = document.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_COUNT:
        return None
    return rank


def base_us_of(document: dict) -> float:
    """``baseTimeNanoseconds`` in µs; 0 when absent (old traces: absolute ``ts``) or malformed."""
    base = document.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base <= 2**63:
        return 0.0
    return base / 1000
