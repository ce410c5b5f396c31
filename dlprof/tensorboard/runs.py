"""The runs under a TensorBoard logdir, and their reports analysed in a background thread, cached per trace file.

A run is a directory holding traces (``*.pt.trace.json[.gz]``, one per rank), found at any depth of the logdir (the
runs of ``traces/``, a sweep's ``<sweep>/<count>/``, each node's copy of a multi-node job), or one that
``dlprof record`` still has open (a ``.dlprof-scratch`` folder, no trace yet). The run directories whose traces name
one ``job`` are one run, as ``dlprof analyze node0/job node1/job`` takes them.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlprof.core import schema
from dlprof.core.errors import DlprofError, display, error_line, printable
from dlprof.trace.discover import find_runs, is_profiler_trace_name, is_trace_file, trace_job

#: How deep under the logdir runs are looked for: a sweep's counts sit two levels down, a node's job three.
MAX_DEPTH = 4
#: At most this many directories are listed per look, so that a huge logdir cannot stall TensorBoard's page.
MAX_DIRECTORIES = 5000
#: The reports kept in memory (the oldest analysed goes first).
CACHED_REPORTS = 32

ANALYSING = "analysing"
READY = "ready"
FAILED = "failed"


@dataclass(frozen=True)
class LogdirRun:
    """One run under the logdir: its name (its path under the logdir; the nodes' paths joined with `` + `` for a
    job of several machines), its run directories, its trace files, and the one line the CLI prints when it has
    no trace to analyse yet (else None)."""

    name: str
    run_dirs: tuple[Path, ...]
    traces: tuple[Path, ...]
    problem: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A run's report as the tab shows it: ``ANALYSING`` (``text`` empty), ``READY`` (``text`` is the HTML report's
    page) or ``FAILED`` (``text`` is the one line the CLI prints)."""

    state: str
    text: str


def _error_line(error: BaseException) -> str:
    """The line ``dlprof analyze`` prints for ``error``, safe to put in a page."""
    return printable(error_line(error))


def _name(directory: Path, logdir: Path) -> str:
    relative = os.path.relpath(directory, logdir)
    return display(directory.name or directory) if relative == "." else display(relative)


def _walk(logdir: Path) -> tuple[list[tuple[Path, list[Path]]], list[tuple[Path, str]]]:
    """The run directories under ``logdir`` with their traces, and the directories being recorded with the CLI's
    line, in path order."""
    runs: list[tuple[Path, list[Path]]] = []
    recording: list[tuple[Path, str]] = []
    stack = [(logdir, 0)]
    listed = 0
    while stack and listed < MAX_DIRECTORIES:
        directory, depth = stack.pop()
        listed += 1
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue
        if any(is_profiler_trace_name(p) and is_trace_file(p) for p in entries):
            runs.append((directory, find_runs(directory)[0][0]))
            continue
        if schema.scratch_dirs(directory):
            try:
                find_runs(directory)
            except DlprofError as error:
                recording.append((directory, _error_line(error)))
                continue
        subs = [p for p in entries if p.is_dir() and not p.name.startswith(".")]
        if depth < MAX_DEPTH:
            stack += [(sub, depth + 1) for sub in reversed(subs)]
        if not subs and any(is_trace_file(p) for p in entries):
            # traces not named as torch.profiler names them (another tool's): candidates the reader checks
            runs.append((directory, find_runs(directory)[0][0]))
    return runs, recording


def find_logdir_runs(logdir: Path) -> list[LogdirRun]:
    """Every run under ``logdir``, by name; the run directories of one multi-machine job as one run.

    A logdir that cannot be listed holds no run.
    """
    try:
        found, recording = _walk(logdir)
    except DlprofError:
        return []
    job_of = {directory: trace_job(traces[0]) for directory, traces in found}
    jobs: dict[str, list[tuple[Path, list[Path]]]] = {}
    for directory, traces in found:
        if job_of[directory] is not None:
            jobs.setdefault(str(job_of[directory]), []).append((directory, traces))
    runs: list[LogdirRun] = []
    joined: set[Path] = set()
    for directory, traces in found:
        if directory in joined:
            continue
        job = job_of[directory]
        nodes = jobs.get(job, []) if job is not None else []
        if len(nodes) > 1:
            joined.update(d for d, _ in nodes)
            name = " + ".join(_name(d, logdir) for d, _ in nodes)
            runs.append(LogdirRun(name, tuple(d for d, _ in nodes), tuple(f for _, fs in nodes for f in fs)))
        else:
            runs.append(LogdirRun(_name(directory, logdir), (directory,), tuple(traces)))
    runs += [LogdirRun(_name(d, logdir), (d,), (), line) for d, line in recording]
    return sorted(runs, key=lambda run: run.name)


def newest_run(runs: list[LogdirRun]) -> str | None:
    """The name of the run whose trace was written last (the tab opens on it); None when no run has a trace."""

    def written_ns(run: LogdirRun) -> int:
        times = []
        for trace in run.traces:
            try:
                times.append(trace.stat().st_mtime_ns)
            except OSError:
                pass
        return max(times, default=-1)

    newest = max(runs, key=written_ns, default=None)
    return newest.name if newest is not None and newest.traces else None


def analyse_run(run: LogdirRun) -> Outcome:
    """The run's report page, or the one line the CLI prints when it cannot be analysed."""
    from dlprof.report import render
    from dlprof.workflows.analyze import build_report

    if run.problem is not None:
        return Outcome(FAILED, run.problem)
    try:
        paths = run.run_dirs[0] if len(run.run_dirs) == 1 else list(run.run_dirs)
        # processes=1: worker processes would start TensorBoard's own __main__ again
        return Outcome(READY, render(build_report(paths, processes=1), "html"))
    except DlprofError as error:
        return Outcome(FAILED, _error_line(error))
    except Exception as error:  # the tab stays up whatever one run does
        return Outcome(FAILED, printable(f"dlprof: internal error: {type(error).__name__}: {error}"))


def _cache_key(run: LogdirRun) -> tuple:
    """What a report depends on: the run's directories, and each trace's size and modification time."""
    stats = []
    for trace in run.traces:
        try:
            stat = trace.stat()
            stats.append((str(trace), stat.st_size, stat.st_mtime_ns))
        except OSError:
            stats.append((str(trace), -1, -1))
    return (run.run_dirs, tuple(stats), run.problem)


class ReportCache:
    """Reports by run, analysed one at a time in a daemon thread (TensorBoard's requests never wait for an analysis),
    kept while the run's traces keep their sizes and modification times."""

    def __init__(self, analyse: Callable[[LogdirRun], Outcome] = analyse_run, size: int = CACHED_REPORTS):
        self._analyse = analyse
        self._size = size
        self._lock = threading.Lock()
        self._done: OrderedDict[tuple, Outcome] = OrderedDict()
        self._pending: set[tuple] = set()
        self._queue: queue.Queue[tuple[tuple, LogdirRun]] = queue.Queue()
        self._thread: threading.Thread | None = None
        #: How many analyses ran (a cached report is not analysed again).
        self.analyses = 0

    def get(self, run: LogdirRun) -> Outcome:
        """The run's report when analysed; else ``ANALYSING``, its analysis queued."""
        if run.problem is not None:
            return Outcome(FAILED, run.problem)
        key = _cache_key(run)
        with self._lock:
            if key in self._done:
                return self._done[key]
            if key not in self._pending:
                self._pending.add(key)
                self._queue.put((key, run))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name="dlprof-analyse", daemon=True)
                    self._thread.start()
        return Outcome(ANALYSING, "")

    def wait(self, run: LogdirRun, timeout_s: float) -> Outcome:
        """The run's report, waiting at most ``timeout_s`` for its analysis (for tests and scripts)."""
        done = threading.Event()
        outcome = self.get(run)
        while outcome.state == ANALYSING and not done.wait(0.05) and timeout_s > 0:
            timeout_s -= 0.05
            outcome = self.get(run)
        return outcome

    def _work(self) -> None:
        while True:
            key, run = self._queue.get()
            try:
                outcome = self._analyse(run)
            except Exception as error:  # the thread must outlive one run's failure, or nothing is analysed again
                outcome = Outcome(FAILED, printable(f"dlprof: internal error: {type(error).__name__}: {error}"))
            with self._lock:
                self.analyses += 1
                self._pending.discard(key)
                self._done[key] = outcome
                while len(self._done) > self._size:
                    self._done.popitem(last=False)
