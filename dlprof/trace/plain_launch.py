"""The steps a plain launch timed (``dlprof record --plain-launch``), read from the run directory and checked once.

The file is ``plain-launch/<trace name less its suffix>.json`` (:func:`dlprof.core.schema.plain_launch_path`), written
by :mod:`dlprof.capture.plain`. A trace without one has no plain launch; a file that is there but cannot be used is
a one-line error that names it, what is wrong and what to do.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from dlprof.core import schema
from dlprof.core.errors import InputError, display
from dlprof.results.record import PlainLaunch


def read_plain_launch(trace: Path) -> PlainLaunch | None:
    """The plain launch of ``trace``; None where it has none.

    Raises:
        InputError: the file beside it is unreadable, not dlprof's, of another trace, or holds a step that is no time.
    """
    path = schema.plain_launch_path(trace)
    if not path.is_file():
        return None
    fix = "delete it to analyze the trace without it, or record again with --plain-launch"
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else "not JSON"
        raise InputError(f"{display(path)}: cannot be read ({reason}); {fix}") from None
    if not isinstance(document, dict) or document.get("schema") != schema.PLAIN_LAUNCH_SCHEMA:
        raise InputError(f"{display(path)}: not a plain launch's steps ({schema.PLAIN_LAUNCH_SCHEMA}); {fix}")
    steps, stop, code, of = (document.get(k) for k in ("step_ms", "stop_step", "exit_code", "trace"))
    problem = None
    if of != trace.name:
        problem = f"it holds the steps of another trace ({of!r}, not {trace.name!r})"
    elif not isinstance(steps, list) or not steps:
        problem = "its step_ms is no list of step times"
    elif not all(_is_time(s) for s in steps):
        problem = "its step_ms holds an entry that is no time in ms (a number, finite, not negative)"
    elif not _is_count(stop) or not isinstance(code, int) or isinstance(code, bool):
        problem = "its stop_step or exit_code is no whole number"
    if problem is not None:
        raise InputError(f"{display(path)}: {problem}; {fix}")
    assert isinstance(steps, list) and isinstance(stop, int) and isinstance(code, int)  # checked above
    return PlainLaunch(trace=trace.name, step_ms=tuple(float(s) for s in steps), stop_step=stop, exit_code=code)


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
