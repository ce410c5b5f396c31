"""What Perfetto's JSON importer warns about in a trace, checked on the document itself.

Perfetto puts complete (``ph: X``) events of one ``(pid, tid)`` on one track, which must nest: an event that starts
inside another and ends after it is moved to an overflow track, with an import warning. Tracks without a
``process_name``/``thread_name`` show as bare numbers. :func:`trace_problems` lists both; the end-to-end tests call
:func:`assert_perfetto_clean` on every trace they record.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

#: Phases whose events live on a thread track (complete, begin/end, instant); counters (``C``) are per process.
THREAD_PHASES = frozenset({"X", "B", "E", "i", "I"})
#: Metadata (``M``) events and flows (``s``, ``t``, ``f``) make no track of their own.
NO_TRACK_PHASES = frozenset({"M", "s", "t", "f"})


@dataclass(frozen=True)
class Overlap:
    """Two complete events of one thread track that partly overlap: ``second`` starts inside ``first`` and ends
    after it."""

    pid: int | str
    tid: int | str
    first: dict
    second: dict

    def __str__(self) -> str:
        return f"({self.pid}, {self.tid}): {_describe(self.first)} partly overlaps {_describe(self.second)}"


@dataclass(frozen=True)
class UnnamedTrack:
    """A process (``tid`` None) or thread track with events but no ``process_name``/``thread_name``."""

    pid: int | str
    tid: int | str | None

    def __str__(self) -> str:
        if self.tid is None:
            return f"process {self.pid} has no process_name"
        return f"thread ({self.pid}, {self.tid}) has no thread_name"


@dataclass(frozen=True)
class TraceProblems:
    overlaps: tuple[Overlap, ...]
    unnamed: tuple[UnnamedTrack, ...]

    def __bool__(self) -> bool:
        return bool(self.overlaps or self.unnamed)

    def lines(self, limit: int = 10) -> list[str]:
        found = [*map(str, self.overlaps), *map(str, self.unnamed)]
        more = [f"... and {len(found) - limit} more"] if len(found) > limit else []
        return found[:limit] + more


def _describe(event: dict) -> str:
    return f"{event.get('name')!r} [{event.get('ts')} +{event.get('dur')} µs, cat {event.get('cat')!r}]"


def _ns(value: object) -> int:
    """A ``ts``/``dur`` in µs as whole ns, as Perfetto's importer reads it (Kineto writes µs with 3 decimals)."""
    return round(float(value) * 1000)  # type: ignore[arg-type]


def partial_overlaps(document: dict) -> list[Overlap]:
    """Every pair of complete events that partly overlap on one ``(pid, tid)``; equal boundaries are fine.

    An event found overlapping is left out of the nesting that follows (Perfetto moves it to another track).
    """
    tracks: dict[tuple, list[tuple[int, int, int, dict]]] = defaultdict(list)
    for i, event in enumerate(document.get("traceEvents", [])):
        if isinstance(event, dict) and event.get("ph") == "X" and "ts" in event:
            start = _ns(event["ts"])
            end = start + _ns(event.get("dur", 0))
            tracks[(event.get("pid"), event.get("tid"))].append((start, -end, i, event))
    found = []
    for (pid, tid), slices in tracks.items():
        slices.sort(key=lambda s: s[:3])  # by start, the longer first, then in the file's order
        open_ends: list[tuple[int, dict]] = []
        for start, neg_end, _, event in slices:
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and -neg_end > open_ends[-1][0]:
                found.append(Overlap(pid, tid, open_ends[-1][1], event))
                continue
            open_ends.append((-neg_end, event))
    return found


def unnamed_tracks(document: dict) -> list[UnnamedTrack]:
    """Processes with events but no ``process_name``, and threads with thread events but no ``thread_name``."""
    process_named, thread_named = set(), set()
    processes, threads = set(), set()
    for event in document.get("traceEvents", []):
        if not isinstance(event, dict):
            continue
        ph, pid, tid = event.get("ph"), event.get("pid"), event.get("tid")
        if ph == "M":
            if event.get("name") == "process_name":
                process_named.add(pid)
            elif event.get("name") == "thread_name":
                thread_named.add((pid, tid))
            continue
        if ph in NO_TRACK_PHASES or (ph in ("i", "I") and event.get("s") == "g"):
            continue
        processes.add(pid)
        if ph in THREAD_PHASES:
            threads.add((pid, tid))
    # Perfetto names a process or thread whose id is a string by that string (Kineto's "Spans" process).
    unnamed = [UnnamedTrack(pid, None) for pid in processes - process_named if not isinstance(pid, str)]
    unnamed += [
        UnnamedTrack(pid, tid)
        for pid, tid in threads - thread_named
        if not (isinstance(pid, str) and isinstance(tid, str))
    ]
    return sorted(unnamed, key=lambda t: (str(t.pid), t.tid is not None, str(t.tid)))  # a process before its threads


def trace_problems(document: dict) -> TraceProblems:
    return TraceProblems(tuple(partial_overlaps(document)), tuple(unnamed_tracks(document)))


def read_trace_file(path: Path) -> dict:
    with gzip.open(path, "rb") as f:
        return json.load(f)


def assert_perfetto_clean(where: Path) -> int:
    """Fails on the first trace under ``where`` (a trace file, or a directory searched recursively) that breaks
    either rule; returns how many traces it checked (a directory without traces fails too)."""
    files = [where] if where.is_file() else sorted(where.rglob("*.pt.trace.json.gz"))
    assert files, f"no trace under {where}"
    for path in files:
        problems = trace_problems(read_trace_file(path))
        assert not problems, f"{path}: Perfetto would warn:\n  " + "\n  ".join(problems.lines())
    return len(files)
