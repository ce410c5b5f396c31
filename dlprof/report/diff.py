"""Renderers of ``dlprof diff``: text, Markdown and the ``dlprof.diff/1`` JSON schema. They format; they never compute.

Every number, change and the verdict come from :func:`dlprof.workflows.diff.diff`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dlprof.errors import UsageError
from dlprof.report.common import UNKNOWN
from dlprof.workflows.diff import DiffResult, DiffRow

FORMATS = ("text", "markdown", "json")
#: Digits shown per unit in text and Markdown (JSON keeps three).
_DIGITS = {"ms": 2, "steps/s": 2, "%": 1, "MiB": 1}
_NOT_APPLICABLE = "-"


def _value(value: float | None, unit: str) -> str:
    return UNKNOWN if value is None else f"{value:.{_DIGITS.get(unit, 2)}f}"


def _delta(value: float | None, unit: str) -> str:
    return _NOT_APPLICABLE if value is None else f"{value:+.{_DIGITS.get(unit, 2)}f}"


def _delta_pct(value: float | None) -> str:
    return _NOT_APPLICABLE if value is None else f"{value:+.1f} %"


def _setting(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) or "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    return str(value)


def _cells(row: DiffRow) -> list[str]:
    return [
        row.metric,
        _value(row.a, row.unit),
        _value(row.b, row.unit),
        _delta(row.delta, row.unit),
        _delta_pct(row.delta_pct),
    ]


_HEADER = ["metric", "A", "B", "change", "change %"]


def render_text(result: DiffResult) -> str:
    """The terminal form."""
    lines = [
        f"dlprof diff: A = {result.a.name}  ({result.a.trace_file})",
        f"             B = {result.b.name}  ({result.b.trace_file})",
        "",
        result.verdict,
        "",
    ]
    if result.settings_changed:
        lines.append("Settings changed (A → B)")
        lines += [f"  {name}: {_setting(a)} → {_setting(b)}" for name, (a, b) in result.settings_changed.items()]
    else:
        lines.append("Settings changed: none that both runs record")
    if result.settings_unknown:
        lines.append(f"  unknown in one run (cannot compare): {', '.join(result.settings_unknown)}")
    rows = [_HEADER, *map(_cells, result.rows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    lines.append("")
    lines += [
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows
    ]
    return "\n".join(lines) + "\n"


def render_markdown(result: DiffResult) -> str:
    """For a GitHub issue: the verdict, the settings changed, then the table."""
    lines = [f"### dlprof diff: `{result.a.name}` → `{result.b.name}`", "", f"**{result.verdict}**", ""]
    if result.settings_changed:
        lines += ["Settings changed (A → B):", ""]
        lines += [f"- `{name}`: `{_setting(a)}` → `{_setting(b)}`" for name, (a, b) in result.settings_changed.items()]
    else:
        lines.append("Settings changed: none that both runs record.")
    if result.settings_unknown:
        lines += ["", f"Unknown in one run (cannot compare): {', '.join(f'`{n}`' for n in result.settings_unknown)}"]
    lines += ["", "| " + " | ".join(_HEADER) + " |", "|---|--:|--:|--:|--:|"]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in result.rows]
    lines += ["", f"A: `{result.a.trace_file}`  ", f"B: `{result.b.trace_file}`"]
    return "\n".join(lines) + "\n"


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def render_json(result: DiffResult) -> str:
    """The ``dlprof.diff/1`` schema (README.md documents it); unknown is ``null``, never NaN."""
    document = {
        "schema": result.schema,
        "a": {"name": result.a.name, "trace_file": result.a.trace_file},
        "b": {"name": result.b.name, "trace_file": result.b.trace_file},
        "verdict": result.verdict,
        "speed_change_pct": _r(result.speed_change_pct, 2),
        "speed_basis": result.speed_basis,
        "settings_changed": {
            name: [_json_value(a), _json_value(b)] for name, (a, b) in result.settings_changed.items()
        },
        "settings_unknown": list(result.settings_unknown),
        "rows": [
            {
                "metric": row.metric,
                "key": row.key,
                "unit": row.unit,
                "a": _r(row.a),
                "b": _r(row.b),
                "delta": _r(row.delta),
                "delta_pct": _r(row.delta_pct, 2),
            }
            for row in result.rows
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def renderer(fmt: str) -> Callable[[DiffResult], str]:
    """The render function of a format.

    Raises:
        dlprof.errors.UsageError: a format diff does not write (html).
    """
    found = {"text": render_text, "markdown": render_markdown, "json": render_json}.get(fmt)
    if found is None:
        raise UsageError(
            f"dlprof diff writes {', '.join(FORMATS)}, not {fmt}; use -o with .txt, .md or .json, or --format"
        )
    return found
