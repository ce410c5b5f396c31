"""Renderers: one module per format, each ``render(report) -> str``. They format; they never compute."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlprof.errors import UsageError

FORMATS = ("text", "markdown", "json", "html")
_EXTENSIONS = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".json": "json",
    ".html": "html",
    ".htm": "html",
}


def pick_format(requested: str | None, output: Path | None) -> str:
    """``--format`` if given, else the output file's extension, else text."""
    if requested:
        return requested
    if output is None:
        return "text"
    found = _EXTENSIONS.get(output.suffix.lower())
    if found is None:
        raise UsageError(
            f"-o {output}: cannot tell the format from '{output.suffix}'; add --format ({', '.join(FORMATS)}) or use"
            " .txt, .md, .json or .html"
        )
    return found


def renderer(fmt: str) -> Callable:
    """The ``render`` function of a format."""
    if fmt == "text":
        from dlprof.report.text import render
    elif fmt == "markdown":
        from dlprof.report.markdown import render
    elif fmt == "json":
        from dlprof.report.json_report import render
    else:
        from dlprof.report.html import render
    return render


def write_report(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a reader never sees half a report, a failure leaves none."""
    import os
    import tempfile

    from dlprof.errors import InputError

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
