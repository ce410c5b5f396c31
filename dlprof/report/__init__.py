"""Renderers: one module per format and kind of result, each a ``render(result) -> str``. They format; they never
compute.

:func:`renderer` picks the render function of a result's kind (a :class:`~dlprof.results.report.Report`,
:class:`~dlprof.results.sweep.SweepResult` or :class:`~dlprof.results.diff.DiffResult`) and a format.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlprof.core.errors import UsageError
from dlprof.results.diff import DiffResult
from dlprof.results.report import Report
from dlprof.results.sweep import SweepResult

#: The formats of a Report (dlprof analyze); a sweep has the same, a diff all but html.
FORMATS = ("text", "markdown", "json", "html")
_EXTENSIONS = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".json": "json",
    ".html": "html",
    ".htm": "html",
}
#: Per kind of result: the command that writes it, and ``module:function`` of each format's renderer.
_RENDERERS: dict[type, tuple[str, dict[str, str]]] = {
    Report: (
        "analyze",
        {
            "text": "dlprof.report.text:render",
            "markdown": "dlprof.report.markdown:render",
            "json": "dlprof.report.json_report:render",
            "html": "dlprof.report.html:render",
        },
    ),
    SweepResult: (
        "sweep",
        {
            "text": "dlprof.report.sweep:render_text",
            "markdown": "dlprof.report.sweep:render_markdown",
            "json": "dlprof.report.sweep:render_json",
            "html": "dlprof.report.sweep:render_html",
        },
    ),
    DiffResult: (
        "diff",
        {
            "text": "dlprof.report.diff:render_text",
            "markdown": "dlprof.report.diff:render_markdown",
            "json": "dlprof.report.diff:render_json",
        },
    ),
}


def pick_format(requested: str | None, output: Path | None, kind: type = Report) -> str:
    """``--format`` if given, else the output file's extension, else text.

    Raises:
        UsageError: the extension names no format, or one that results of ``kind`` are not written in.
    """
    found: str | None
    if requested:
        found = requested
    elif output is None:
        found = "text"
    else:
        found = _EXTENSIONS.get(output.suffix.lower())
        if found is None:
            raise UsageError(
                f"-o {output}: cannot tell the format from '{output.suffix}'; add --format ({', '.join(FORMATS)}) or"
                " use .txt, .md, .json or .html"
            )
    renderer(kind, found)  # a format this kind has
    return found


def renderer(kind: type, fmt: str) -> Callable[[Any], str]:
    """The render function of results of ``kind`` (``Report``, ``SweepResult``, ``DiffResult``) in ``fmt``.

    Raises:
        UsageError: results of ``kind`` are not written in ``fmt`` (a diff has no html).
    """
    command, by_format = _RENDERERS[kind]
    where = by_format.get(fmt)
    if where is None:
        extensions = [next(e for e, f in _EXTENSIONS.items() if f == known) for known in by_format]
        raise UsageError(
            f"dlprof {command} writes {', '.join(by_format)}, not {fmt}; use -o with {', '.join(extensions[:-1])} or"
            f" {extensions[-1]}, or --format"
        )
    module, function = where.split(":")
    return getattr(importlib.import_module(module), function)


def render(result: Report | SweepResult | DiffResult, fmt: str) -> str:
    """``result`` in ``fmt``."""
    return renderer(type(result), fmt)(result)


def write_report(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader never sees half a report, a failure leaves none."""
    import os
    import tempfile

    from dlprof.core.errors import InputError

    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: the directory {directory} does not exist; create it or choose another -o")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".partial")
    except OSError as error:
        raise InputError(
            f"{path}: cannot write into {directory} ({error.strerror}); choose a writable directory"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a report is for sharing
        os.replace(tmp, path)
    except OSError as error:
        os.unlink(tmp)
        raise InputError(f"{path}: cannot write it ({error.strerror}); choose another -o") from None
    except BaseException:
        os.unlink(tmp)
        raise
