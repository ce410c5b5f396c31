"""Load one trace file (``.json`` or ``.json.gz``) into a dict, fast, with one-line errors."""
from __future__ import annotations

import gc
import gzip
import zlib
from pathlib import Path

import orjson

from dlprof.errors import TraceFormatError, TraceNotFoundError


def _decompress(path: Path, raw: bytes) -> bytes:
    try:
        return gzip.decompress(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise TraceFormatError(f"{path}: truncated or corrupt gzip ({error}); record the trace again or gunzip what is left") from None


def read_trace(path: Path) -> dict:
    """The trace document: ``{"traceEvents": [...], ...}`` (a bare Chrome event array is accepted).

    Raises:
        TraceNotFoundError: no such file.
        TraceFormatError: not gzip where gzip is expected, not JSON, or no ``traceEvents``.
    """
    if not path.is_file():
        raise TraceNotFoundError(f"{path}: no such trace file; give a run directory or a .json/.json.gz trace")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise TraceFormatError(f"{path}: cannot read it ({error.strerror}); check its permissions") from None
    if raw[:2] == b"\x1f\x8b":
        raw = _decompress(path, raw)
    elif path.suffix == ".gz":
        raise TraceFormatError(f"{path}: named .gz but not gzip; rename it to .json if it is plain JSON")
    # Parsing creates millions of small objects: the cyclic GC would rescan them all again and again.
    enabled = gc.isenabled()
    gc.disable()
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise TraceFormatError(f"{path}: not JSON ({error}); give a trace written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)") from None
    finally:
        if enabled:
            gc.enable()
    if isinstance(document, list):
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise TraceFormatError(f"{path}: JSON without a 'traceEvents' list; give a trace written by torch.profiler")
    return document
