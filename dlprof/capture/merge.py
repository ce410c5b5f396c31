"""Merge one rank's Kineto trace, the DataLoader spans and memory samples into one trace file.

Runs in the ``dlprof record`` process after the training process has ended, so that a crash of the
training process still leaves a trace of what was recorded. No torch import.

The output is a Chrome trace that TensorBoard's profiler plugin, Perfetto and HTA read as they read
any Kineto trace: dlprof's worker spans are extra processes (``DataLoader worker k (pid P)``), memory samples
are counter events, and the manifest is the top-level ``dlprof`` object. Every track is named, and complete events
nest on each (:mod:`dlprof.capture.tracks`).
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from dlprof.capture import tracks
from dlprof.capture.memory import MemoryReading, process_memory
from dlprof.capture.session import spans_dir_of
from dlprof.capture.spanfile import NextCallRecord, SpanFiles, read_span_files
from dlprof.core import schema
from dlprof.core.manifest import (
    MANIFEST_VERSION,
    BatchFacts,
    LoaderConfig,
    MainProcessCpu,
    Manifest,
    MemorySummary,
    StepCounts,
    WorkerStart,
)
from dlprof.results.record import ClockReading, RankResult

#: A main-process ``__next__`` span dlprof measured and the Kineto event inside it are matched when
#: Kineto's event lies within ours give or take this much (Kineto's ts are µs with ns decimals; its op timestamps
#: land a few µs inside a ``time_ns()`` read taken just before: docs/ARCHITECTURE.md#facts-the-code-relies-on).
MATCH_TOLERANCE_NS = 50_000
#: gzip level of the trace: 6 compresses Kineto JSON much faster than 9 for a file barely larger (see
#: docs/ARCHITECTURE.md#facts-the-code-relies-on).
GZIP_LEVEL = 6
_MIB = 2**20


def _us(ns: int, base_ns: int) -> float:
    return round((ns - base_ns) / 1000, 3)


def _percentiles(values: list[float]) -> dict | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "min": round(ordered[0], 3),
        "median": round(statistics.median(ordered), 3),
        "max": round(ordered[-1], 3),
    }


def link_next_events(events: list[dict], base_ns: int, next_calls: list[NextCallRecord]) -> dict:
    """Tag Kineto's DataLoader ``__next__`` events with the batch they returned, and re-label them.

    Each Kineto ``enumerate(DataLoader)#...__next__`` event lies inside one ``__next__`` call that
    dlprof timed with ``time.time_ns()``; matching the two gives every event its loader, epoch and
    batch index, and measures how well the clocks agree: a clock offset of d would put one end of
    Kineto's event up to d outside dlprof's span.

    The event's ``cat`` becomes ``cpu_op`` (original kept in args): torch-tb-profiler 0.4.3 ignores
    ``user_annotation`` events other than ProfilerStep, which made its DataLoader share read 0 %.

    Returns:
        Alignment statistics for the manifest (slack in µs; negative means outside dlprof's span).
    """
    calls = sorted(next_calls, key=lambda c: c.start_ns)
    starts = [c.start_ns for c in calls]
    start_slack, end_slack, unmatched = [], [], 0
    for event in events:
        if event.get("ph") != "X" or not schema.is_dataloader_next(event.get("name", "")):
            continue
        args = event.setdefault("args", {})
        if event.get("cat") != "cpu_op":
            args[schema.ARG_ORIGINAL_CATEGORY] = event.get("cat")
            event["cat"] = "cpu_op"
        ev_start = base_ns + round(float(event["ts"]) * 1000)
        ev_end = ev_start + round(float(event.get("dur", 0)) * 1000)
        i = bisect.bisect_right(starts, ev_start + MATCH_TOLERANCE_NS) - 1
        best = None
        for j in (i, i - 1):
            if 0 <= j < len(calls) and calls[j].end_ns + MATCH_TOLERANCE_NS >= ev_end:
                best = calls[j]
                break
        if best is None:
            unmatched += 1
            continue
        args[schema.ARG_LOADER] = best.loader_id
        args[schema.ARG_EPOCH] = best.epoch
        args[schema.ARG_BATCH] = best.batch
        start_slack.append((ev_start - best.start_ns) / 1000)
        end_slack.append((best.end_ns - ev_end) / 1000)
    slack = start_slack + end_slack
    return {
        "next_events_matched": len(start_slack),
        "next_events_unmatched": unmatched,
        "start_slack_us": _percentiles(start_slack),
        "end_slack_us": _percentiles(end_slack),
        # A lower bound on the clock offset between dlprof's spans and Kineto's events: 0 when every
        # Kineto event lies inside the span that dlprof timed around it.
        "max_offset_us": round(max(0.0, -min(slack)), 3) if slack else None,
    }


def _worker_names(workers: list[WorkerStart]) -> dict[int, str]:
    loaders_with_workers = {w.loader for w in workers}
    names = {}
    for w in workers:
        name = schema.WORKER_PROCESS_NAME.format(worker_id=w.worker_id)
        loader = f"loader {w.loader}, " if len(loaders_with_workers) > 1 else ""
        names[w.pid] = f"{name} ({loader}pid {w.pid})"
    return names


def span_events(
    found: SpanFiles, main_pid: int, base_ns: int, window: tuple[int, int], consumed: set[tuple[int, int, int]]
) -> list[dict]:
    """Chrome events for the spans in ``window`` (ns) or of a batch in ``consumed``, plus track names.

    ``consumed`` holds the (loader, epoch, batch) of every batch a traced ``__next__`` returned: such
    a batch may have been produced (prefetched) before the window opened.
    """
    events: list[dict] = []
    lo, hi = window
    kept = [
        s
        for s in found.spans
        if not ((s.end_ns < lo or s.start_ns > hi) and (s.loader_id, s.epoch, s.batch) not in consumed)
    ]
    # Tracks only for workers with spans in the trace: workers of other epochs would be empty tracks of the same name.
    shown = {s.pid for s in kept}
    workers = [w for w in found.workers if w.pid in shown]
    names = _worker_names(workers)
    for sort_index, w in enumerate(sorted(workers, key=lambda w: (w.loader, w.start_ns, w.worker_id))):
        events.append({"ph": "M", "name": "process_name", "pid": w.pid, "tid": 0, "args": {"name": names[w.pid]}})
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": w.pid, "tid": 0, "args": {"sort_index": 1000 + sort_index}}
        )
        events.append(
            {"ph": "M", "name": "thread_name", "pid": w.pid, "tid": w.pid, "args": {"name": f"worker {w.worker_id}"}}
        )
    main_loader_tid = schema.MAIN_LOADER_TID_OFFSET + main_pid
    if any(s.worker_id < 0 for s in kept):
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": main_pid,
                "tid": main_loader_tid,
                "args": {"name": schema.MAIN_LOADER_THREAD_NAME},
            }
        )
    for s in kept:
        in_main = s.worker_id < 0
        events.append(
            {
                "ph": "X",
                "cat": schema.CATEGORY,
                "name": s.name,
                "pid": main_pid if in_main else s.pid,
                "tid": main_loader_tid if in_main else s.pid,
                "ts": _us(s.start_ns, base_ns),
                "dur": round((s.end_ns - s.start_ns) / 1000, 3),
                "args": {
                    schema.ARG_CPU_US: round(s.cpu_ns / 1000, 3),
                    **({schema.ARG_RUNQ_US: round(s.extra / 1000, 3)} if s.name == schema.SPAN_BATCH else {}),
                    **({schema.ARG_TENSORS: s.extra} if s.name == schema.SPAN_COLLATE else {}),
                    schema.ARG_LOADER: s.loader_id,
                    schema.ARG_EPOCH: s.epoch,
                    schema.ARG_BATCH: s.batch,
                    schema.ARG_WORKER: s.worker_id,
                },
            }
        )
    return events


def memory_events(
    samples: Iterable[MemoryReading], pids: set[int], base_ns: int, window: tuple[int, int]
) -> list[dict]:
    """Counter events (``ph: C``) for the processes in ``pids``: their readings inside ``window``, and
    each one's last reading before it (sampling is sparse: a counter track then starts with its value)."""
    lo, hi = window
    before: dict[int, MemoryReading] = {}
    kept = []
    for s in samples:
        if s.pid not in pids or s.time_ns > hi:
            continue
        if s.time_ns >= lo:
            kept.append(s)
        elif s.pid not in before or s.time_ns > before[s.pid].time_ns:
            before[s.pid] = s
    return [
        {
            "ph": "C",
            "cat": schema.CATEGORY,
            "name": schema.MEMORY_COUNTER,
            "pid": s.pid,
            "tid": s.pid,
            "ts": _us(s.time_ns, base_ns),
            "args": {"uss_mib": round(s.uss_bytes / _MIB, 2), "pss_mib": round(s.pss_bytes / _MIB, 2)},
        }
        for s in sorted([*before.values(), *kept], key=lambda s: s.time_ns)
    ]


def memory_summary(
    samples: list[MemoryReading], main_pid: int, workers: Sequence[WorkerStart], interval_ms: int
) -> MemorySummary:
    """Per process, first / last / peak USS and PSS, threads and CPU time over the whole run (not only the traced
    window), and its USS over time (:func:`dlprof.capture.memory.process_memory`)."""
    roles: dict[int, tuple[str, int | None]] = {main_pid: ("main", None)}
    roles.update({w.pid: ("worker", w.worker_id) for w in workers})
    by_pid: dict[int, list[MemoryReading]] = {}
    for s in samples:
        if s.pid in roles:
            by_pid.setdefault(s.pid, []).append(s)
    in_order = sorted(by_pid.items(), key=lambda kv: kv[1][0].time_ns)
    processes = tuple(process_memory(pid, *roles[pid], series) for pid, series in in_order)
    return MemorySummary(interval_ms=interval_ms, processes=processes)


def batch_facts(found: SpanFiles) -> BatchFacts:
    """Every batch the probe measured in the recording, in the order they were made."""
    records = sorted(found.batches, key=lambda r: r.made_ns)
    sources = Counter(r.padding_source for r in records)
    return BatchFacts(
        loader=tuple(r.loader_id for r in records),
        epoch=tuple(r.epoch for r in records),
        batch=tuple(r.batch for r in records),
        worker=tuple(r.worker_id for r in records),
        made_ns=tuple(r.made_ns for r in records),
        rows=tuple(r.rows for r in records),
        width=tuple(r.width for r in records),
        real_tokens=tuple(r.real_tokens for r in records),
        longest=tuple(r.longest for r in records),
        nbytes=tuple(r.nbytes for r in records),
        fingerprint=tuple(r.fingerprint for r in records),
        # Batches without a token tensor have no source: they do not outvote those that have one.
        padding_source=max(sources, key=lambda source: (source is not None, sources[source])) if sources else None,
        # The median: a worker preempted in the middle of one measurement would make a mean of the machine's load.
        check_us=round(statistics.median(r.check_ns for r in records) / 1000, 2) if records else None,
        unmeasured=found.batches_unmeasured,
    )


def _main_cpu(window_clock: Sequence[ClockReading], window: tuple[int, int]) -> MainProcessCpu | None:
    """The main process's CPU time (all threads) and its training thread's run-queue wait per recorded step."""
    inside = [reading for reading in window_clock if window[0] <= reading.wall_ns <= window[1]]
    if len(inside) < 2:
        return None
    steps = len(inside) - 1
    first, last = inside[0], inside[-1]
    per_step = lambda ns: round(ns / 1e6 / steps, 3)
    return MainProcessCpu(
        steps=steps,
        wall_ms_per_step=per_step(last.wall_ns - first.wall_ns),
        cpu_ms_per_step=per_step(last.cpu_ns - first.cpu_ns),
        runq_ms_per_step=per_step(last.runq_ns - first.runq_ns),
    )


def primary_loader(loaders: Sequence[LoaderConfig], next_events: list[dict]) -> LoaderConfig | None:
    """The loader that returned the most batches inside the traced window (the training loader)."""
    if not loaders:
        return None
    counts: dict[int, int] = {}
    for event in next_events:
        loader_id = event.get("args", {}).get(schema.ARG_LOADER)
        if loader_id is not None:
            counts[loader_id] = counts.get(loader_id, 0) + 1
    return max(loaders, key=lambda loader: (counts.get(loader.id, 0), loader.batches))


def write_gzip_json_atomically(document: dict, final_path: Path, scratch_dir: Path) -> None:
    """Write ``document`` as gzip JSON to a scratch file, then rename it into place in one step."""
    scratch_dir.mkdir(parents=True, exist_ok=True)
    tmp = scratch_dir / (final_path.name + ".partial")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0) as gz:
            gz.write(dumps_trace(document))
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, final_path)


@dataclass(frozen=True, kw_only=True)
class MergeInputs:
    """What the ``dlprof record`` process knows beyond the session directory."""

    session_dir: Path
    command: tuple[str, ...]
    script: tuple[str, ...]
    #: None while the training goes on (the trials' traces of ``--then best|keep``).
    exit_code: int | None
    memory_samples: list[MemoryReading]
    memory_interval_ms: int
    overrides: dict | None = None
    #: ``--redact``: write the trace with placeholders for host names, the user, arguments and paths (core.redact).
    redact: bool = False
    #: The key of the job over several machines that this record is a node of (dlprof.capture.job), as the manifest
    #: holds it (a digest with ``--redact``); None: a job of its own.
    job: str | None = None


def _window(events: list[dict], base_ns: int, result: RankResult) -> tuple[int, int]:
    """The traced window, ns: from the window's opening (else the first event) to the last event's end."""
    ends = [
        base_ns + round((float(e["ts"]) + float(e.get("dur", 0))) * 1000)
        for e in events
        if e.get("ph") == "X" and "ts" in e
    ]
    window_end = max(ends) if ends else result.finished_ns
    window_start = result.window_start_ns or (min(ends) if ends else base_ns)
    return window_start, window_end


def _clock(base_ns: int, window: tuple[int, int], alignment: dict) -> dict:
    """The manifest's ``clock``: how dlprof's spans and Kineto's events share a clock, and how well they agree."""
    return {
        "source": "CLOCK_REALTIME (time.time_ns), the clock of baseTimeNanoseconds",
        "base_time_ns": base_ns,
        "window_ns": list(window),
        "worker_cpu_clock": "process CPU time",
        "main_cpu_clock": "thread CPU time",
        "alignment": alignment,
    }


def merge_rank(kineto: dict, result: RankResult, inputs: MergeInputs) -> tuple[dict, Manifest]:
    """One rank's Kineto trace with dlprof's events merged in and its rank set, and the rank's manifest.

    ``kineto`` is changed in place; :func:`trace_document` puts the (maybe redacted) manifest into it.
    """
    events: list[dict] = kineto.setdefault("traceEvents", [])
    base_ns = int(kineto.get("baseTimeNanoseconds", 0))
    found = read_span_files(spans_dir_of(inputs.session_dir, result.pid))
    alignment = link_next_events(events, base_ns, found.next_calls)
    next_events = [e for e in events if e.get("ph") == "X" and schema.is_dataloader_next(e.get("name", ""))]
    steps_recorded = sum(1 for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    window = _window(events, base_ns, result)
    consumed = {
        (a[schema.ARG_LOADER], a[schema.ARG_EPOCH], a[schema.ARG_BATCH])
        for a in (e.get("args", {}) for e in next_events)
        if schema.ARG_BATCH in a
    }
    events.extend(span_events(found, result.pid, base_ns, window, consumed))
    events.extend(memory_events(inputs.memory_samples, {result.pid, *(w.pid for w in found.workers)}, base_ns, window))
    events.extend(tracks.untangle(events))
    events.extend(tracks.name_tracks(events, _worker_names(found.workers)))

    # torch.profiler writes distributedInfo only when the process group existed as the window opened
    # (often not yet): dlprof always writes the rank and world size it knows from the launcher.
    found_info = kineto.get("distributedInfo")
    distributed = found_info if isinstance(found_info, dict) else {}
    backend = distributed.get("backend")
    kineto["distributedInfo"] = {
        **distributed,
        "backend": backend,
        "rank": result.rank,
        "world_size": result.world_size,
    }
    manifest = Manifest(
        manifest_version=MANIFEST_VERSION,
        dlprof_version=result.versions.get("dlprof"),
        status=result.status,
        error=result.error,
        exit_code=inputs.exit_code,
        command=inputs.command,
        script=inputs.script,
        rank=result.rank,
        world_size=result.world_size,
        local_rank=result.local_rank,
        local_world_size=result.local_world_size,
        process_argv=result.process_argv,
        backend=backend if isinstance(backend, str) else None,
        schedule=result.schedule,
        steps=StepCounts(run=result.steps_run, recorded=steps_recorded),
        main_process_cpu=_main_cpu(result.window_clock, window),
        loader=primary_loader(result.loaders, next_events),
        loaders=result.loaders,
        workers=tuple(found.workers),
        host=result.host,
        versions=result.versions,
        clock=_clock(base_ns, window, alignment),
        memory=memory_summary(inputs.memory_samples, result.pid, found.workers, inputs.memory_interval_ms),
        batches=batch_facts(found),
        span_records_skipped=found.skipped_records,
        step_clock=result.step_clock,
        overrides=inputs.overrides or {},
        stopped_early=result.stopped_early,
        redacted=inputs.redact,
        trials=result.trials,
        job=inputs.job,
    )
    return kineto, manifest


def trace_document(kineto: dict, manifest: Manifest) -> dict:
    """The final trace document: ``kineto`` (from :func:`merge_rank`) with the manifest as its ``dlprof`` object."""
    kineto[schema.MANIFEST_KEY] = manifest.to_dict()
    # distributedInfo first and metadata before the events: HTA reads a trace's rank from its first
    # lines, and a reader can take the manifest from the first kilobytes without parsing every event.
    head = {"distributedInfo": kineto["distributedInfo"]}
    return {
        **head,
        **{k: v for k, v in kineto.items() if k not in ("traceEvents", "distributedInfo")},
        "traceEvents": kineto["traceEvents"],
    }


def dumps_trace(document: dict) -> bytes:
    """The trace document as JSON: compact, but for a first line that holds ``distributedInfo`` spelled ``"rank": N``.

    HTA finds a file's rank with the regex ``"rank":\\s+(\\d+)`` on the first line that matches: in
    compact JSON (``"rank":1``) it finds none, reads every file as rank 0 and keeps one of them.
    """
    info = document.get("distributedInfo")
    rest = orjson.dumps({k: v for k, v in document.items() if k != "distributedInfo"})
    if not isinstance(info, dict):
        return rest
    head = b'{"distributedInfo": ' + json.dumps(info, separators=(", ", ": ")).encode()
    return head + (b",\n" + rest[1:] if rest != b"{}" else b"}")
