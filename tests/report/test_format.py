"""One number formatter for every renderer (report/format.py), and one way to pick a renderer (report.renderer)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlprof.core.errors import UsageError
from dlprof.report import pick_format, renderer
from dlprof.report.format import fixed, ms, pct, per_s, rate, rounded
from dlprof.results.diff import DiffResult
from dlprof.results.report import Report
from dlprof.results.sweep import SweepResult


@pytest.mark.parametrize("unknown", [None, math.nan, math.inf, -math.inf])
def test_what_is_not_a_number_is_unknown_in_every_form(unknown):
    assert rounded(unknown) is None  # JSON: null, never NaN
    assert fixed(unknown) == ms(unknown) == "unknown"
    assert rate(unknown) == fixed(unknown, ".1f", "-") == "-"
    assert per_s(unknown if unknown is not None else math.nan) == "-"
    assert pct(1.0, unknown if unknown is not None else 0.0) == "-" and pct(unknown or math.nan, 2.0) == "-"


def test_numbers_as_before():
    assert (rounded(1.23456), rounded(1.23456, 2), rounded(7)) == (1.235, 1.23, 7)
    assert (ms(2.0), fixed(-0.25, "+.2f"), rate(12.34), per_s(4.0), per_s(0.0), pct(1.0, 4.0)) == (
        "2.00",
        "-0.25",
        "12.3",
        "250.00",
        "-",
        "25.0",
    )


@pytest.mark.parametrize(
    "kind, fmt, function",
    [
        (Report, "text", "dlprof.report.text.render"),
        (Report, "html", "dlprof.report.html.render"),
        (SweepResult, "json", "dlprof.report.sweep.render_json"),
        (DiffResult, "markdown", "dlprof.report.diff.render_markdown"),
    ],
)
def test_one_function_picks_every_renderer(kind, fmt, function):
    found = renderer(kind, fmt)
    assert f"{found.__module__}.{found.__name__}" == function


def test_a_format_a_kind_does_not_have_is_refused():
    with pytest.raises(UsageError, match=r"dlprof diff writes text, markdown, json, not html; use -o with \.txt"):
        renderer(DiffResult, "html")
    with pytest.raises(UsageError, match="dlprof diff writes"):
        pick_format(None, Path("diff.html"), DiffResult)
    assert pick_format(None, Path("sweep.html"), SweepResult) == "html"
    assert pick_format(None, None, DiffResult) == "text"
