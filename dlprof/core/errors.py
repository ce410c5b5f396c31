"""One error hierarchy. ``cli.py`` prints ``str(error)`` as one line and exits with code 2.

Every message names the file (or option), the problem and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path


def error_line(error: BaseException) -> str:
    """The one line every dlprof front end shows for ``error`` (the CLI on stderr, the TensorBoard tab in its page)."""
    return f"dlprof: error: {error}"


def printable(text: str) -> str:
    """``text`` with lone surrogates replaced: a path that is not UTF-8 (a directory named on another
    system) comes back from the OS with surrogate escapes, which no terminal or UTF-8 file can take."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte
        return text.encode("utf-8", "replace").decode("utf-8")


def display(path: Path | str) -> str:
    """A path as text that can always be printed: bytes that are not UTF-8 (a run named on another system) replaced."""
    return printable(os.fsdecode(path))


class DlprofError(Exception):
    """Base of every error dlprof reports to the user."""

    exit_code = 2

    def __init__(self, message: str = "", *args: object):
        super().__init__(printable(message) if isinstance(message, str) else message, *args)


class UsageError(DlprofError):
    """An option or argument that cannot work (bad value, conflicting options)."""


class InputError(DlprofError):
    """An input file or directory (dataset, model, tokenizer, script) that cannot be used."""


class TraceNotFoundError(DlprofError):
    """No trace where one was expected."""


class TraceFormatError(DlprofError):
    """A file that is not a readable PyTorch profiler trace."""


class NoStepsError(DlprofError):
    """A trace without ``ProfilerStep#N`` events."""


class RecordError(DlprofError):
    """``dlprof record`` could not produce a trace (the script failed before the profiler recorded)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
