"""The output step that ``dlprof analyze``, ``sweep`` and ``diff`` share: ``-o`` checked before any work, then every
result rendered, redacted (with ``--redact``) and written the same way."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dlprof.core import redact
from dlprof.core.errors import DlprofError, InputError, UsageError, display
from dlprof.report import render, write_report
from dlprof.results.diff import DiffResult
from dlprof.results.report import Report, RunReport
from dlprof.results.sweep import SweepResult
from dlprof.trace.discover import find_runs


def _is_report(path: Path) -> bool:
    """A JSON report dlprof wrote (rewriting it is fine): it opens with its schema."""
    try:
        with path.open("rb") as f:
            return f.read(64).replace(b" ", b"").replace(b"\n", b"").startswith(b'{"schema":"dlprof.report/')
    except OSError:
        return False


def _traces(given: Path) -> list[Path]:
    """The trace files an input path stands for: itself, or the traces under a directory."""
    if given.is_file():
        return [given]
    return [f for files in find_runs(given)[0] for f in files] if given.is_dir() else []


def check_output(
    output: Path | None, inputs: Sequence[Path] = (), *, what: str = "report", keep_run_dirs_clean: bool = False
) -> None:
    """Refuse, before any work, an ``-o`` that would overwrite an input or cannot be written.

    Args:
        output: the ``-o`` file (None: the terminal, nothing to check).
        inputs: what the command reads: trace files, run directories, directories of runs.
        what: what is written (``report``, ``diff``), for the message.
        keep_run_dirs_clean: also refuse a ``.json``/``.gz`` file at the top of an input directory, which HTA
            would read as a trace (``dlprof analyze`` writes its reports there on request, and skips them).

    Raises:
        UsageError: ``output`` is an input trace (a dlprof report excepted), or a ``.json``/``.gz`` file in an
            input directory with ``keep_run_dirs_clean``.
        InputError: its directory does not exist or cannot be written, or it is not a regular file.
    """
    if output is None:
        return
    target = output.resolve()
    for given in inputs:
        for trace in _traces(given):
            if target == trace.resolve() and not _is_report(target):
                raise UsageError(
                    f"-o {display(output)}: is the input trace {display(trace)}; write the {what} to another file"
                    + (" (e.g. report.html)" if what == "report" else "")
                )
        in_run_dir = given.is_dir() and target.parent == given.resolve()
        if keep_run_dirs_clean and in_run_dir and target.name.endswith((".json", ".gz")):
            raise UsageError(
                f"-o {display(output)}: a .json/.gz file inside the run directory {display(given.resolve())} would be"
                " read as a trace; write it elsewhere"
            )
    directory = target.parent
    if not directory.is_dir():
        raise InputError(
            f"-o {display(output)}: the directory {display(directory)} does not exist; create it or choose another -o"
        )
    if not os.access(directory, os.W_OK) or target.is_relative_to("/proc") or target.is_relative_to("/sys"):
        raise InputError(f"-o {display(output)}: cannot write into {display(directory)}; choose a writable directory")
    if target.exists() and not target.is_file():
        raise InputError(f"-o {display(output)}: not a regular file; choose another -o")


def runs_redactor(runs: Sequence[RunReport], inputs: Sequence[Path] = (), names: Sequence[str] = ()) -> redact.Redactor:
    """The Redactor of a report on ``runs``: what they hold about their machines, users and commands.

    Their manifests (host names, command lines, paths), every rank's host, the host in each trace file's name (every
    rank's and ``names``), this machine's host, user and home directory, and each input given as an absolute path.
    """
    manifests = [run.manifest.to_dict() for run in runs if run.manifest is not None]
    # Every rank's host (a report of many ranks names them), not only the reported rank's.
    manifests += [{"host": {"hostname": r.host}} for run in runs if run.ranks for r in run.ranks.ranks if r.host]
    traces = [run.info.trace_file for run in runs]
    traces += [row.trace_file for run in runs if run.ranks is not None for row in run.ranks.ranks]
    given = [str(path if path.is_dir() else path.parent) for path in inputs if path.is_absolute()]
    return redact.for_run(manifests, trace_names=[*traces, *names], paths=given)


def redactor_for(result: Report | DiffResult, inputs: Sequence[Path]) -> redact.Redactor:
    """The Redactor of ``dlprof analyze --redact`` (a Report) or ``dlprof diff --redact`` (a DiffResult)."""
    if isinstance(result, DiffResult):
        return runs_redactor([result.a.report, result.b.report], inputs)
    return runs_redactor(result.runs, inputs, [s.path for s in result.skipped])


def emit(
    result: Report | SweepResult | DiffResult,
    fmt: str,
    output: Path | None = None,
    redactor: redact.Redactor | None = None,
) -> str:
    """``result`` rendered in ``fmt``, redacted by ``redactor`` when given, and written to ``output`` when given.

    Returns:
        The text as rendered (and redacted), for the terminal when there is no ``output``.

    Raises:
        InputError: ``output`` cannot be written.
        DlprofError: the rendering came out empty (a bug: a command never prints nothing and succeeds).
    """
    text = render(result, fmt)
    if not text.strip():
        raise DlprofError(f"the {fmt} output came out empty, which is a bug in dlprof; please report it")
    if redactor is not None:
        text = redactor.redact_rendered(text, fmt)
    if output is not None:
        write_report(output, text)
    return text
