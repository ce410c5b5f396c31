"""Run discovery: which files under a path are traces, grouped by run, and loading one of them.

A run directory holds one trace per rank (``*.pt.trace.json[.gz]``, as torch.profiler's
``tensorboard_trace_handler`` and dlprof name them); a directory of run directories holds one run each.
"""

from __future__ import annotations

from pathlib import Path

from dlprof import schema
from dlprof.errors import TraceNotFoundError, display
from dlprof.trace.build import build_run
from dlprof.trace.reader import Progress, parse_trace, read_bytes
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


def load_run(trace: Path, name: str | None = None, *, progress: bool = True) -> TraceRun:
    """Read and index one trace file (a line on stderr when that takes more than a couple of seconds, unless
    ``progress`` is False: a worker among several, whose caller counts the ranks done instead)."""
    if not progress:
        return _load_run(trace, name)[0]
    try:
        size = f" ({trace.stat().st_size / 1e6:,.0f} MB)" if trace.is_file() else ""
    except OSError:
        size = ""
    with Progress(f"reading trace {display(trace)}{size}") as shown:
        run, size_bytes = _load_run(trace, name)
        shown.done(f"{size_bytes / 1e6:,.0f} MB of JSON, {run.event_count / 1e6:.1f} M events")
    return run


def _load_run(trace: Path, name: str | None) -> tuple[TraceRun, int]:
    """The trace's run, and the bytes of JSON read."""
    text = read_bytes(trace)
    size_bytes = len(text)
    document = parse_trace(trace, text)
    del text  # the raw events hold the buffer until build_run lets them go
    return build_run(document, trace, display(name or trace.parent.name or trace.name), release=True), size_bytes
