"""Renderers of ``dlprof diff``: text, Markdown and the ``dlprof.diff/1`` JSON schema. They format; they never compute.

Every number, change and the verdict come from :func:`dlprof.workflows.diff.diff`; :func:`dlprof.report.renderer`
picks one of them.
"""

from __future__ import annotations

import json
from typing import Any

from dlprof.report.common import headline_line
from dlprof.report.format import NOT_APPLICABLE, finite, fixed, rounded
from dlprof.report.json_report import headline_document
from dlprof.results.diff import DiffResult, DiffRow, DiffRun

#: Digits shown per unit in text and Markdown (JSON keeps three).
_DIGITS = {"ms": 2, "steps/s": 2, "%": 1, "MiB": 1}


def _value(value: float | None, unit: str) -> str:
    return fixed(value, f".{_DIGITS.get(unit, 2)}f")


def _delta(value: float | None, unit: str) -> str:
    return fixed(value, f"+.{_DIGITS.get(unit, 2)}f", NOT_APPLICABLE)


def _delta_pct(value: float | None) -> str:
    return NOT_APPLICABLE if finite(value) is None else f"{value:+.1f} %"


def _setting(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) or "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    return str(value)


def _rank(run: DiffRun, separator: str) -> str:
    """Which rank of a run of several ranks was compared (the slowest, as dlprof analyze reports); "" for one rank."""
    if run.ranks == 1:
        return ""
    return f"{separator}rank {run.rank} of {run.ranks}: the slowest, which dlprof analyze reports"


def headlines(result: DiffResult) -> list[str]:
    """What a diff leads with: each side's headline (what its own report leads with), A then B."""
    return [f"{side} = {run.name}: {headline_line(run.report)}" for side, run in (("A", result.a), ("B", result.b))]


def findings_lines(result: DiffResult) -> list[str]:
    """Each side's findings by id (what its own report details), A then B; nothing for a side without findings."""
    return [
        f"{side} findings: {', '.join(f.id for f in run.report.advice.findings)}"
        for side, run in (("A", result.a), ("B", result.b))
        if run.report.advice.findings
    ]


def _side(run: DiffRun) -> dict:
    """One side in JSON; ``rank`` and ``ranks`` only for a run of several ranks, ``findings`` (their ids) only for a
    run with findings."""
    side: dict[str, Any] = {
        "name": run.name,
        "trace_file": run.trace_file,
        "headline": headline_document(run.report.advice.headline),
    }
    if run.ranks > 1:
        side.update(rank=run.rank, ranks=run.ranks)
    if run.report.advice.findings:
        side["findings"] = [f.id for f in run.report.advice.findings]
    return side


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
        *headlines(result),
        *findings_lines(result),
        "",
        f"dlprof diff: A = {result.a.name}  ({result.a.trace_file}{_rank(result.a, '; ')})",
        f"             B = {result.b.name}  ({result.b.trace_file}{_rank(result.b, '; ')})",
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
    lines = [f"- **{line}**" for line in headlines(result)] + [f"- {line}" for line in findings_lines(result)] + [""]
    lines += [f"### dlprof diff: `{result.a.name}` → `{result.b.name}`", "", f"**{result.verdict}**", ""]
    if result.settings_changed:
        lines += ["Settings changed (A → B):", ""]
        lines += [f"- `{name}`: `{_setting(a)}` → `{_setting(b)}`" for name, (a, b) in result.settings_changed.items()]
    else:
        lines.append("Settings changed: none that both runs record.")
    if result.settings_unknown:
        lines += ["", f"Unknown in one run (cannot compare): {', '.join(f'`{n}`' for n in result.settings_unknown)}"]
    lines += ["", "| " + " | ".join(_HEADER) + " |", "|---|--:|--:|--:|--:|"]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in result.rows]
    lines += [
        "",
        f"A: `{result.a.trace_file}`{_rank(result.a, ', ')}  ",
        f"B: `{result.b.trace_file}`{_rank(result.b, ', ')}",
    ]
    return "\n".join(lines) + "\n"


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def render_json(result: DiffResult) -> str:
    """The ``dlprof.diff/1`` schema (docs/json-schemas.md documents it); unknown is ``null``, never NaN."""
    document = {
        "schema": result.schema,
        "dlprof_version": result.dlprof_version,
        "a": _side(result.a),
        "b": _side(result.b),
        "verdict": result.verdict,
        "speed_change_pct": rounded(result.speed_change_pct, 2),
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
                "a": rounded(row.a),
                "b": rounded(row.b),
                "delta": rounded(row.delta),
                "delta_pct": rounded(row.delta_pct, 2),
            }
            for row in result.rows
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
