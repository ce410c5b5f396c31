"""``dlprof diff`` names each side's findings by id (each side's own report details them), and says nothing of
findings when neither side has any."""

from __future__ import annotations

import dataclasses
import json

from conftest import DATA_DIR

from dlprof.report.diff import render_json, render_markdown, render_text
from dlprof.results.diff import DiffResult
from dlprof.workflows.diff import diff
from report.findings_example import FINDINGS


def _with_findings(result: DiffResult, side: str, findings: tuple = FINDINGS) -> DiffResult:
    run = getattr(result, side)
    report = dataclasses.replace(run.report, advice=dataclasses.replace(run.report.advice, findings=findings))
    return dataclasses.replace(result, **{side: dataclasses.replace(run, report=report)})


def test_each_sides_findings_by_id():
    found = diff(DATA_DIR / "tiny_dlprof_trace.json", DATA_DIR / "tiny_trials_trace.json")
    plain = _with_findings(_with_findings(found, "a", ()), "b", ())
    result = _with_findings(plain, "b")
    ids = "padding, pretokenize, threads-oversubscribed, shared-memory"

    text = render_text(result).splitlines()
    assert text[:3] == [*render_text(plain).splitlines()[:2], f"B findings: {ids}"]
    assert "findings" not in render_text(plain)

    markdown = render_markdown(result)
    assert f"\n- B findings: {ids}\n" in markdown and "findings" not in render_markdown(plain)

    document = json.loads(render_json(result))
    assert document["b"]["findings"] == [f.id for f in FINDINGS] and "findings" not in document["a"]
    assert "findings" not in json.loads(render_json(plain))["b"]
