"""The checks of a trace event's fields: every field the analysis uses, checked once, where the builder meets it.

A field of the wrong type or an impossible value (negative or non-finite time, negative bytes, an id that is not an
int or string) raises :class:`Malformed`, whose message names the field; :mod:`dlprof.trace.build` skips the event
and counts it. Also the checked complete event as the builder keeps it (:data:`RawEvent`).
"""

from __future__ import annotations

import math

import msgspec

from dlprof.core import schema
from dlprof.trace.reader import ABSENT, TOO_DEEP, decode_raw, is_raw, raw_is_object
from dlprof.trace.run import MAX_COUNT, MAX_TS_US


class Malformed(Exception):
    """An event field of the wrong type or an impossible value; the message names the field."""


def checked_time(value: object, field_name: str, limit: float, signed: bool = False) -> float:
    """A finite number no larger than ``limit`` in magnitude, and non-negative unless ``signed``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"'{field_name}' not a number")
    try:
        number = float(value)
    except OverflowError:
        raise Malformed(f"'{field_name}' too large") from None
    if not math.isfinite(number) or abs(number) > limit or (number < 0 and not signed):
        raise Malformed(
            f"'{field_name}' {'non-finite or too large' if signed else 'negative, non-finite or too large'}"
        )
    return number


def checked_ts(value: object) -> float:
    # Signed: ts count from baseTimeNanoseconds, and dlprof merges worker spans that began before it.
    return checked_time(value, "ts", MAX_TS_US, signed=True)


def checked_count(value: object, field_name: str, limit: int = MAX_COUNT, signed: bool = False) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > limit or (value < 0 and not signed):
        raise Malformed(f"'{field_name}' not a valid count")
    return value


def checked_ident(value: object, field_name: str) -> int | str:
    """A pid or tid: an int or a string (old traces write ``"tid": "25738"`` or ``"stream 7"``)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise Malformed(f"'{field_name}' not an int or string")


def checked_correlation(value: object) -> int | str | None:
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise Malformed("'args.correlation' not an int or string")


def decoded_args(args: object) -> dict:
    """An event's ``args``, decoded if still raw: an object, or ``{}`` when absent."""
    if args is ABSENT:
        return {}
    if is_raw(args):
        try:
            args = decode_raw(args)
        except msgspec.DecodeError:  # valid JSON (the split checked it), so a number beyond a double
            raise Malformed("'args' holding a number beyond a double") from None
        except RecursionError:  # the split followed it, a few frames up the stack: at the parser's limit
            raise Malformed(f"'args' {TOO_DEEP}") from None
    if not isinstance(args, dict):
        raise Malformed("'args' not an object")
    return args


def check_args(args: object) -> None:
    """That ``args`` is an object (or absent), without decoding it: most events' arguments are never read."""
    if args is not ABSENT and not (raw_is_object(args) if is_raw(args) else isinstance(args, dict)):
        raise Malformed("'args' not an object")


def stream_of(args: dict, tid: int | str) -> int:
    """The GPU stream: ``args.stream``, else the tid (``7`` or old traces' ``"stream 7"``)."""
    if "stream" in args:
        return checked_count(args["stream"], "args.stream")
    if isinstance(tid, int):
        return tid
    digits = tid.rsplit(" ", 1)[-1]
    return int(digits) if digits.isdigit() and len(digits) < 16 else 0


#: A complete event kept for after the pass, its fields checked: a plain tuple (a NamedTuple is much slower to
#: make, and a GPU trace keeps one per kernel, copy and runtime call), unpacked where read, else indexed by these
#: names. ``args``: the arguments the analysis reads, or :data:`NO_ARGS`; ``cat``: a GPU activity's category, else "".
RawEvent = tuple[str, float, float, "int | str", "int | str", dict, str]
#: The ``args`` of an event whose arguments the analysis never reads (one shared empty dict, never written to).
NO_ARGS: dict = {}
NAME, START_US, END_US, PID, TID, ARGS, CAT = range(7)


def batch_key(args: dict) -> tuple[int, int, int] | None:
    """(loader, epoch, batch) of a dlprof span or ``__next__`` call; None when absent or malformed."""
    try:
        return (
            checked_count(args[schema.ARG_LOADER], "loader"),
            checked_count(args[schema.ARG_EPOCH], "epoch"),
            checked_count(args[schema.ARG_BATCH], "batch"),
        )
    except (KeyError, Malformed):
        return None
