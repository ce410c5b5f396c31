"""Load one trace file (``.json`` or ``.json.gz``), fast and in bounded memory, with one-line errors.

A big trace holds millions of events, and as Python dicts they would take many times the file in memory. Here the file
is decompressed once into one buffer, msgspec checks its syntax and splits the top level without
building anything (``traceEvents`` becomes a list of :class:`msgspec.Raw`, views into the buffer), and
the events are decoded one at a time, into a small struct whose ``args`` stay raw, while
:func:`dlprof.trace.build.build_run` keeps only what the analysis needs. Nothing here judges an event's
fields: that is ``build_run``'s job, done once.
"""

from __future__ import annotations

import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeGuard, final

import msgspec

from dlprof.core.errors import TraceFormatError, TraceNotFoundError

GZIP_MAGIC = b"\x1f\x8b"
#: Compressed bytes read at a time: the compressed file is never held whole next to the JSON.
READ_CHUNK = 1 << 20
#: A step that takes longer than this (s) says on stderr what it is doing.
PROGRESS_AFTER_S = 2.0


class _Absent:
    """A field the event does not have (``null`` is a value, and a wrong one where a number is due)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class Event(msgspec.Struct, gc=False):
    """The fields of one trace event that dlprof reads, as they are in the JSON (any type, checked later).

    ``args`` is a :class:`msgspec.Raw` view into the trace's buffer (decoded only for the events whose
    arguments the analysis reads), or the decoded value when the event came from a dict. Defaults are
    what an absent field means; ``pid`` and ``args`` keep :data:`ABSENT`, as an absent ``pid`` is an
    error on metadata events and 0 elsewhere.
    """

    ph: Any = None
    name: Any = None
    cat: Any = ""
    ts: Any = None
    dur: Any = 0
    pid: Any = ABSENT
    tid: Any = 0
    args: Any = ABSENT

    @classmethod
    def from_dict(cls, event: dict) -> Event:
        return cls(
            event.get("ph"),
            event.get("name"),
            event.get("cat", ""),
            event.get("ts"),
            event.get("dur", 0),
            event.get("pid", ABSENT),
            event.get("tid", 0),
            event.get("args", ABSENT),
        )


class _RawEvent(Event, gc=False):
    """The same fields, decoded from JSON with ``args`` left raw."""

    args: msgspec.Raw = ABSENT


_EVENT = msgspec.json.Decoder(_RawEvent)
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw] | list[msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_ANY = msgspec.json.Decoder()


@final  # final, so that ``type(x) is NotAnEvent`` (the builder's fast test) tells it from an Event
class NotAnEvent(ValueError):
    """One element of ``traceEvents`` that is not an event object; the message is the reason to count."""


#: Why an element is skipped when it nests deeper than the parser follows on the stack left where it is decoded.
TOO_DEEP = "nesting too deep to read"


def _too_deep(path: Path) -> TraceFormatError:
    """The error of a trace nested deeper than the JSON parser follows: msgspec recurses on Python's stack, so it stops
    near Python's recursion limit (1,000 levels by default). Profilers' traces nest 4 to 7 levels (every trace in
    tests/data, dlprof's manifest included)."""
    return TraceFormatError(
        f"{path}: JSON nested too deep to read (more than Python's recursion limit allows, about"
        f" {sys.getrecursionlimit()} levels; a profiler's trace nests fewer than 10); record the trace again, or give"
        " the file torch.profiler wrote"
    )


def decode_raw(raw: msgspec.Raw) -> Any:
    """A raw JSON value decoded (already checked for syntax when the trace was split).

    Raises:
        msgspec.DecodeError: a number beyond a double.
        RecursionError: nested deeper than the parser follows from here.
    """
    return _ANY.decode(raw)


def is_raw(value: object) -> TypeGuard[msgspec.Raw]:
    return type(value) is msgspec.Raw


def raw_is_object(raw: msgspec.Raw) -> bool:
    """Whether the raw JSON value is an object, without decoding it."""
    return memoryview(raw)[0] == 0x7B  # "{": a Raw starts at its value, never at whitespace


def _not_an_event(error: msgspec.DecodeError | RecursionError) -> NotAnEvent:
    if isinstance(error, RecursionError):
        # The split followed it, a few frames up the stack: within a few levels of the parser's limit.
        return NotAnEvent(TOO_DEEP)
    if not isinstance(error, msgspec.ValidationError):
        return NotAnEvent("not valid JSON")  # the split checked the syntax: never seen, but never a traceback
    # The only ways a syntactically valid element fails the loosely typed struct.
    return NotAnEvent("not an object" if str(error).startswith("Expected `object`") else "a number beyond a double")


#: What :meth:`TraceEvents.drain` leaves in place of a raw event it decoded: it holds no part of the buffer.
_EMPTY_RAW = msgspec.Raw()


class TraceEvents:
    """``traceEvents`` of a trace read from a file: a sized, iterable sequence that decodes each event as it is reached.

    Iteration yields :class:`Event` structs, and :class:`NotAnEvent` instances (never raised) for the
    elements that are not objects, hold a number beyond a double or nest too deep, which ``build_run`` counts.
    :meth:`drain` iterates once and frees as it goes.
    """

    def __init__(self, raws: list[msgspec.Raw]) -> None:
        self._raws = raws
        self._count = len(raws)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Event | NotAnEvent]:
        decode = _EVENT.decode
        for raw in self._raws:
            try:
                yield decode(raw)
            except (msgspec.DecodeError, RecursionError) as error:  # ValidationError: valid JSON, not an event
                yield _not_an_event(error)

    def drain(self) -> Iterator[Event | NotAnEvent]:
        """Iterate once, letting each raw event go as it is decoded: when the last goes, so does the buffer
        they point into, and the decoded events are never all in memory next to it."""
        raws, self._raws = self._raws, []
        decode = _EVENT.decode
        for i in range(len(raws)):
            raw = raws[i]
            raws[i] = _EMPTY_RAW
            try:
                yield decode(raw)
            except (msgspec.DecodeError, RecursionError) as error:  # ValidationError: valid JSON, not an event
                yield _not_an_event(error)


def _gunzip(path: Path, f) -> bytearray:
    """The decompressed contents of an open gzip file (every member), streamed into one growing buffer."""
    out = bytearray()
    decompressor, fed = zlib.decompressobj(wbits=31), False
    try:
        while chunk := f.read(READ_CHUNK):
            while chunk:
                if not fed:
                    chunk = chunk.lstrip(b"\x00")  # gzip files may be padded with zeros after a member
                    if not chunk:
                        break
                fed = True
                out += decompressor.decompress(chunk)
                if not decompressor.eof:
                    break
                chunk = decompressor.unused_data  # the start of a next member, if any
                decompressor, fed = zlib.decompressobj(wbits=31), False
        if fed:
            out += decompressor.flush()
            if not decompressor.eof:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
    except (EOFError, zlib.error) as error:
        raise TraceFormatError(
            f"{path}: truncated or corrupt gzip ({error}); record the trace again or gunzip what is left"
        ) from None
    return out


def read_bytes(path: Path) -> bytes | bytearray:
    """The trace's JSON text, decompressed when it is gzip.

    Raises:
        TraceNotFoundError: no such file.
        TraceFormatError: unreadable, or not gzip where gzip is expected.
    """
    if not path.is_file():
        raise TraceNotFoundError(f"{path}: no such trace file; give a run directory or a .json/.json.gz trace")
    try:
        with path.open("rb") as f:
            if f.read(2) == GZIP_MAGIC:
                f.seek(0)
                return _gunzip(path, f)
            if path.suffix == ".gz":
                raise TraceFormatError(f"{path}: named .gz but not gzip; rename it to .json if it is plain JSON")
            f.seek(0)
            return f.read()
    except OSError as error:
        raise TraceFormatError(f"{path}: cannot read it ({error.strerror}); check its permissions") from None


def parse_trace(path: Path, text: bytes | bytearray) -> dict:
    """The trace document of JSON ``text``: its top-level values decoded, ``traceEvents`` a :class:`TraceEvents`.

    Nesting is bounded here, where the file enters: msgspec recurses on Python's stack, and what nests deeper than it
    follows (RecursionError, near Python's recursion limit) is one error. Past the reader nothing walks an event's
    values recursively (they are read field by field), and the manifest's parser bounds its free-form values
    (:data:`dlprof.core.lenient.MAX_NESTING`).
    """
    try:
        return _parse(path, text)
    except RecursionError:
        raise _too_deep(path) from None


def _parse(path: Path, text: bytes | bytearray) -> dict:
    not_json = "give a trace written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)"
    try:
        top = _TOP.decode(text)
    except msgspec.DecodeError as error:  # ValidationError, its subclass, is a valid JSON document of another type
        if not isinstance(error, msgspec.ValidationError):
            raise TraceFormatError(f"{path}: not JSON ({error}); {not_json}") from None
        top = None
    if isinstance(top, list):
        return {"traceEvents": TraceEvents(top)}
    no_events = f"{path}: JSON without a 'traceEvents' list; give a trace written by torch.profiler"
    if not isinstance(top, dict) or "traceEvents" not in top:
        raise TraceFormatError(no_events)
    try:
        events = _LIST.decode(top.pop("traceEvents"))
    except msgspec.ValidationError:
        raise TraceFormatError(no_events) from None
    document: dict = {}
    for key, raw in top.items():
        try:
            document[key] = _ANY.decode(raw)
        except msgspec.DecodeError as error:
            raise TraceFormatError(f"{path}: not JSON ({error} in '{key}'); {not_json}") from None
    document["traceEvents"] = TraceEvents(events)
    return document


def read_trace(path: Path) -> dict:
    """The trace document: ``{"traceEvents": [...], ...}`` (a bare Chrome event array is accepted).

    ``traceEvents`` is a :class:`TraceEvents`, which decodes each event when iterated; the other
    top-level values are plain JSON values.

    Raises:
        TraceNotFoundError: no such file.
        TraceFormatError: not gzip where gzip is expected, not JSON, nested too deep, or no ``traceEvents``.
    """
    return parse_trace(path, read_bytes(path))


class ReadProgress:
    """A line on stderr for a step that turns out to take longer than :data:`PROGRESS_AFTER_S`, and only then.

    ``dlprof: reading trace X (1.0 GB) ...`` appears once the step has run that long; :meth:`done`
    completes the line (``... parsed 3.2 M events in 12.3 s``). stdout, where reports go, is never touched.
    """

    def __init__(self, message: str, after_s: float = PROGRESS_AFTER_S) -> None:
        self._message = message
        self._start = time.perf_counter()
        self._lock = threading.Lock()
        self._shown = self._finished = False
        self._timer = threading.Timer(after_s, self._show)
        self._timer.daemon = True
        self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if not self._finished:
                print(f"dlprof: {self._message} ...", end="", file=sys.stderr, flush=True)
                self._shown = True

    def done(self, result: str = "done") -> None:
        self._timer.cancel()
        with self._lock:
            self._finished = True
            if self._shown:
                print(f" {result} in {time.perf_counter() - self._start:.1f} s", file=sys.stderr, flush=True)

    def __enter__(self) -> ReadProgress:
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is not None:
            self.done("stopped")
