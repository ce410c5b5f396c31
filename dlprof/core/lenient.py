"""A lenient parser of JSON documents into frozen dataclasses: the manifest, a rank's recording, a trial plan.

Parsing is forgiving field by field: a field of the wrong type is read as unknown (``None``, its default, or an
empty collection) and named among the problems; only a missing or invalid required field makes the whole object
unusable. Values that could hurt downstream code (NaN, infinity, absurd magnitudes, deep nesting) are never kept.
Imports nothing but the standard library, so the training process and the analysis both use it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import TYPE_CHECKING, Any, TypeVar, Union

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # resolved in the dataclass's own module


def _optional_of(hint: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (hint, False)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


class Invalid(Exception):
    """A value that cannot be read as the field's type: the message names where and why."""


#: Integer fields that may be negative (a process killed by a signal exits with -N; the step clock's ``ready`` is -1
#: where unknown; a batch's ``worker`` is -1 in the main process); every other integer is a count, size, id or time
#: and is read as unknown when negative.
SIGNED_INTS = frozenset({"exit_code", "ready", "worker"})
#: Text fields that hold a version number: text naming a NaN or an infinity is none (nor is it printed).
VERSION_STRS = frozenset({"dlprof_version", "cuda", "hip"})
#: Larger integers are no count, size or nanosecond time (int64 is what JSON writers produce), and would
#: overflow a float downstream.
MAX_INT = 2**63 - 1
#: Larger floats are no duration (ms: 30,000 years), size (MiB) or rate this manifest holds; they would
#: overflow to infinity once summed or multiplied downstream.
MAX_FLOAT = 1e15
#: The deepest a free-form value (``clock``, ``overrides``) may nest: dlprof writes them 3 levels deep at most.
#: Deeper ones are read as unknown, so that the code that walks a manifest recursively (``dataclasses.asdict``,
#: redaction, ``repr``) stays far below Python's recursion limit (1,000) whatever the trace holds.
MAX_NESTING = 32
#: How a non-finite number is spelled as text (what ``float()`` and JavaScript accept): a problem never quotes it,
#: so that no report prints NaN or infinity, not even as the bad value it names.
_NON_FINITE_TEXT = re.compile(r"(?<![\w.])[+-]?(nan|inf|infinity)(?!\w)", re.IGNORECASE)


def why_unfit(value: Any) -> str | None:
    """Why a JSON value may not be kept or quoted as it is (nested too deep, or a non-finite number in it), else None.

    Iterative: a value nested deeper than Python's recursion limit is judged without a RecursionError.
    """
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "is a non-finite number" if item is value else "holds a non-finite number"
        if isinstance(item, str) and _NON_FINITE_TEXT.search(item):
            return "is text naming a non-finite number" if item is value else "holds text naming a non-finite number"
        if isinstance(item, (dict, list, tuple)):
            if depth >= MAX_NESTING:
                return f"is nested more than {MAX_NESTING} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple, float, str)))
    return None


def _invalid(value: Any, where: str, expected: str) -> Invalid:
    """The problem of ``where`` holding ``value`` where ``expected`` is due, the value quoted when it may be."""
    unfit = why_unfit(value)
    if unfit is not None:
        return Invalid(f"{where} {unfit}, not a valid {expected}")
    return Invalid(f"{where} = {str(value)[:40]!r} is not a valid {expected}")


def _convert(value: Any, hint: Any, where: str, problems: list[str]) -> Any:
    inner, optional = _optional_of(hint)
    if value is None:
        if optional:
            return None
        raise Invalid(f"{where} is missing")
    origin = typing.get_origin(inner)
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        if not isinstance(value, dict):
            raise Invalid(f"{where} is not an object")
        return build(inner, value, where, problems)
    if origin is tuple:
        item_hint = typing.get_args(inner)[0]
        if not isinstance(value, list):
            raise Invalid(f"{where} is not a list")
        items = []
        for i, item in enumerate(value):
            try:
                items.append(_convert(item, item_hint, f"{where}[{i}]", problems))
            except Invalid as invalid:
                problems.append(f"{invalid}: entry skipped")
        return tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise Invalid(f"{where} is not an object")
        if typing.get_args(inner)[1] is str:
            texts = {}
            for k, v in value.items():
                # A version (the only such dict): text, or a number read as its text; never a NaN, either way.
                if isinstance(v, (str, int, float)) and why_unfit(v) is None:
                    texts[str(k)] = str(v)
                else:
                    problems.append(f"{_invalid(v, f'{where}.{k}', 'str')}: entry skipped")
            return texts
        unfit = why_unfit(value)
        if unfit is not None:
            raise Invalid(f"{where} {unfit}")
        return dict(value)
    if inner is bool:
        if isinstance(value, bool):
            return value
    elif inner is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and abs(value) <= MAX_INT
            and (value >= 0 or where.rsplit(".", 1)[-1].split("[", 1)[0] in SIGNED_INTS)
        ):
            return value
    elif inner is float:
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0 <= value <= MAX_FLOAT
        ):
            return float(value)
    elif inner is str:
        if isinstance(value, str) and not (where.rsplit(".", 1)[-1] in VERSION_STRS and why_unfit(value)):
            return value
    elif inner is Any:
        unfit = why_unfit(value)
        if unfit is None:
            return value
        raise Invalid(f"{where} {unfit}")
    raise _invalid(value, where, getattr(inner, "__name__", str(inner)))


def build(cls: type[DataclassInstance], document: dict, where: str, problems: list[str]) -> Any:
    values = {}
    for name, hint in _hints(cls).items():
        if name not in document:
            continue  # absent: the dataclass default (unknown), or Invalid below for required fields
        try:
            values[name] = _convert(document[name], hint, f"{where}.{name}", problems)
        except Invalid as invalid:
            inner, optional = _optional_of(hint)
            default = cls.__dataclass_fields__[name]
            if (
                optional
                or default.default is not dataclasses.MISSING
                or default.default_factory is not dataclasses.MISSING
            ):
                problems.append(f"{invalid}: read as unknown")
            else:
                raise
    try:
        return cls(**values)
    except TypeError:  # a required field is absent
        missing = [
            n
            for n, f in cls.__dataclass_fields__.items()
            if n not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        raise Invalid(f"{where} has no {', '.join(missing)}") from None


_T = TypeVar("_T", bound="DataclassInstance")


def parse_dataclass(cls: type[_T], document: Any, where: str) -> tuple[_T | None, tuple[str, ...]]:
    """Parse a JSON object into the frozen dataclass ``cls`` (nested dataclasses, tuples and dicts included), as the
    manifest is parsed: the object (``None`` when a required field is missing or invalid) and what was wrong.

    A field of the wrong type is read as unknown (its default) and named among the problems, each
    prefixed by ``where`` and the field's path (``result.host.usable_cores``).
    """
    if not isinstance(document, dict):
        return None, (f"{where} is not an object",)
    problems: list[str] = []
    try:
        return build(cls, document, where, problems), tuple(problems)
    except Invalid as invalid:
        return None, (str(invalid), *problems)
