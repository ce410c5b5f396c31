"""Run discovery: which files under a path are traces, grouped by run, and loading one of them.

A run directory holds one trace per rank (``*.pt.trace.json[.gz]``, as torch.profiler's
``tensorboard_trace_handler`` and dlprof name them); a directory of run directories holds one run each.
The run directories that the nodes of one job wrote each on their own disk are one run: their manifests hold the
same ``job`` (:func:`find_job_runs`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path

from dlprof.core import schema
from dlprof.core.errors import TraceNotFoundError, UsageError, display
from dlprof.trace.build import build_run
from dlprof.trace.plain_launch import read_plain_launch
from dlprof.trace.reader import ReadProgress, parse_trace, read_bytes
from dlprof.trace.run import TraceRun

TRACE_SUFFIXES = (".json", ".json.gz")
#: What torch.profiler's tensorboard_trace_handler (and dlprof) names a trace.
PROFILER_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def is_profiler_trace_name(path: Path) -> bool:
    """Named as torch.profiler's ``tensorboard_trace_handler`` (and dlprof) name traces: ``*.pt.trace.json[.gz]``."""
    return path.name.endswith(PROFILER_TRACE_SUFFIXES)


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
    """Why ``run_dir`` holds no trace yet, when ``dlprof record`` (of one node of a job, or more) has (or had) it open;
    else None."""
    owners = schema.scratch_owners(run_dir)
    if not owners:
        return None
    live = [owner for owner in owners if owner is not None and owner.alive]
    if not live:
        return "holds only the scratch files of a record that did not finish; record it again"
    return f"is still being recorded (dlprof record, {live[0].where}); analyze it once that has finished"


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


#: How much of a trace's text is read for its manifest (:func:`trace_job`): dlprof writes the manifest before the
#: events, within the first megabytes even for long runs (the step clock is a few dozen bytes a step).
MANIFEST_HEAD_BYTES = 64 << 20
_CHUNK = 1 << 20
_EVENTS_KEY = b'"traceEvents"'


def _head_chunks(path: Path):
    """The trace's text from its start, a chunk at a time (gunzipped when it is gzip)."""
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        decompressor = zlib.decompressobj(wbits=31) if gzipped else None
        while chunk := f.read(_CHUNK):
            yield decompressor.decompress(chunk) if decompressor is not None else chunk


def _manifest_of_head(text: bytes | bytearray, start: int) -> tuple[object, int]:
    """The ``dlprof`` object of a trace whose text begins with ``text``, from the keys before ``"traceEvents"`` (dlprof
    writes the events last); ``(None, -1)`` when found without one, ``(None, next start)`` when not found yet."""
    while (at := text.find(_EVENTS_KEY, start)) >= 0:
        before = bytes(text[:at]).rstrip()
        if before.endswith(b","):
            try:
                document = json.loads(before[:-1] + b"}")
            except ValueError:  # "traceEvents" inside a string: look further
                document = None
            if isinstance(document, dict):
                return document.get(schema.MANIFEST_KEY), -1
        start = at + 1
    return None, max(0, len(text) - len(_EVENTS_KEY))


def trace_job(trace: Path) -> str | None:
    """The ``job`` in ``trace``'s manifest, read from the head of the file without parsing its events; None when it
    has none (a job of its own, an older dlprof, another tool's trace) or cannot be read."""
    text, start = bytearray(), 0
    try:
        for chunk in _head_chunks(trace):
            text += chunk
            manifest, start = _manifest_of_head(text, start)
            if start < 0 or len(text) > MANIFEST_HEAD_BYTES:
                break
        else:
            manifest = json.loads(bytes(text)).get(schema.MANIFEST_KEY)  # a trace without events: the whole document
    except (OSError, ValueError, AttributeError, zlib.error):
        return None
    job = manifest.get("job") if isinstance(manifest, dict) else None
    return job if isinstance(job, str) and job else None


def find_job_runs(paths: Sequence[Path]) -> tuple[list[list[Path]], list[tuple[Path, str]]]:
    """The traces of several run directories (or trace files) that the nodes of one job wrote each on their own, as
    one run: ``dlprof analyze node0/job node1/job``. One path is :func:`find_runs`.

    Raises:
        TraceNotFoundError: a path holds no trace.
        UsageError: a path holds several runs, or the paths are not of one job (their manifests' ``job`` differ, or
            one has none).
    """
    if len(paths) == 1:
        return find_runs(paths[0])
    files: list[Path] = []
    jobs: dict[str, str | None] = {}
    for path in paths:
        groups, _ = find_runs(path)
        if len(groups) > 1:
            raise UsageError(
                f"{display(path)}: holds {len(groups)} runs; give the run directories of one job (one per node), or"
                " analyze it alone"
            )
        jobs[display(path)] = trace_job(groups[0][0])
        files += [f for f in groups[0] if f not in files]
    if None in jobs.values() or len(set(jobs.values())) > 1:
        named = ", ".join(f"{path} ({f'job {job}' if job else 'no job in its manifest'})" for path, job in jobs.items())
        raise UsageError(
            f"{named}: not the nodes of one job; analyze each alone, or give the run directories that the nodes of one"
            " multi-node 'dlprof record' wrote"
        )
    return [files], []


def find_traces(path: Path) -> list[list[Path]]:
    """The trace files under ``path``, grouped by run (see :func:`find_runs`).

    Raises:
        TraceNotFoundError: nothing that looks like a trace there.
    """
    return find_runs(path)[0]


def load_run(trace: Path, name: str | None = None, *, progress: bool = True) -> TraceRun:
    """Read and index one trace file (a line on stderr when that takes more than a couple of seconds, unless
    ``progress`` is False: a worker among several, whose caller counts the ranks done instead)."""
    if not progress:
        return _load_run(trace, name)[0]
    try:
        size = f" ({trace.stat().st_size / 1e6:,.0f} MB)" if trace.is_file() else ""
    except OSError:
        size = ""
    with ReadProgress(f"reading trace {display(trace)}{size}") as shown:
        run, size_bytes = _load_run(trace, name)
        shown.done(f"{size_bytes / 1e6:,.0f} MB of JSON, {run.event_count / 1e6:.1f} M events")
    return run


def _load_run(trace: Path, name: str | None) -> tuple[TraceRun, int]:
    """The trace's run, and the bytes of JSON read."""
    text = read_bytes(trace)
    size_bytes = len(text)
    document = parse_trace(trace, text)
    del text  # the raw events hold the buffer until build_run lets them go
    run = build_run(document, trace, display(name or trace.parent.name or trace.name), release=True)
    run.plain_launch = read_plain_launch(trace)
    return run, size_bytes
