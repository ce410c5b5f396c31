"""Every renderer against a golden file, on the hand-written dlprof trace and on the one with in-process trials
(tests/data/tiny_trials_trace.json, written by scripts/make_trials_trace.py), and on the first with findings added by
hand (tiny_findings.*).

``UPDATE_GOLDEN=1 python -m pytest tests/report/test_golden.py`` rewrites the files; review the diff.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import DATA_DIR, TESTS_DIR

from dlprof import __version__
from dlprof.report import renderer
from dlprof.results.report import Report
from dlprof.workflows.analyze import build_report
from report.findings_example import FINDINGS, with_findings

GOLDEN_DIR = DATA_DIR / "golden"
#: How the golden files hold the dlprof version stamped into a JSON document, so that a version bump leaves them be.
VERSION_PLACEHOLDER = "<dlprof version>"
EXTENSIONS = {"text": "txt", "markdown": "md", "json": "json", "html": "html"}
#: Golden file stem per trace.
TRACES = {"tiny_dlprof": "tiny_dlprof_trace.json", "tiny_trials": "tiny_trials_trace.json"}


def normalised(rendered: str) -> str:
    """``rendered`` with the dlprof version it is stamped with replaced by :data:`VERSION_PLACEHOLDER`."""
    return rendered.replace(f'"dlprof_version": "{__version__}"', f'"dlprof_version": "{VERSION_PLACEHOLDER}"')


def _report(trace: str) -> Report:
    # A relative path, so that the golden files do not depend on where the repository is.
    cwd = os.getcwd()
    os.chdir(TESTS_DIR.parent)
    try:
        return build_report(DATA_DIR.relative_to(TESTS_DIR.parent) / trace)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def report():
    return _report(TRACES["tiny_dlprof"])


@pytest.fixture(scope="module")
def reports():
    return {stem: _report(trace) for stem, trace in TRACES.items()}


@pytest.mark.parametrize("stem", sorted(TRACES))
@pytest.mark.parametrize("fmt", sorted(EXTENSIONS))
def test_renderer_matches_golden_file(reports, stem, fmt):
    rendered = normalised(renderer(Report, fmt)(reports[stem]))
    golden = GOLDEN_DIR / f"{stem}.{EXTENSIONS[fmt]}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")


#: Formats whose golden file of a report with findings is kept (the HTML page shows the same words).
FINDINGS_FORMATS = ("text", "markdown", "json")


@pytest.mark.parametrize("fmt", FINDINGS_FORMATS)
def test_findings_match_golden_file(report, fmt):
    rendered = normalised(renderer(Report, fmt)(with_findings(report)))
    golden = GOLDEN_DIR / f"tiny_findings.{EXTENSIONS[fmt]}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", FINDINGS_FORMATS)
def test_findings_come_after_the_headline_and_before_the_breakdown(report, fmt):
    """Only the findings' section is added: the report without it is the report without findings."""
    plain = renderer(Report, fmt)(with_findings(report, ()))
    rendered = renderer(Report, fmt)(with_findings(report))
    if fmt == "json":
        document = json.loads(rendered)
        assert json.loads(plain)["findings"] == []
        assert [f["id"] for f in document.pop("findings")] == [f.id for f in FINDINGS]
        assert document == {k: v for k, v in json.loads(plain).items() if k != "findings"}
        return
    headline = report.runs[0].advice.headline
    assert headline is not None
    heading = rendered.index("Findings (the largest gain first)")
    assert rendered.index(headline.text) < heading < rendered.index("Where a step" if fmt == "text" else "ms per step")
    assert "Findings" not in plain
    lines = rendered.splitlines()
    for finding in FINDINGS:
        assert any(finding.evidence in line for line in lines) and any(f"fix: {finding.fix}" in line for line in lines)


def test_findings_gain_in_words(report):
    text = renderer(Report, "text")(with_findings(report))
    assert "[warning] pad to the longest sequence: up to 31 % faster" in text
    assert "[warning] pre-tokenize the dataset once: 12 % faster (predicted)" in text
    assert "[info] threads oversubscribed: measured 4.0 % faster" in text
    assert "  - [error] /dev/shm too small for the batches in flight\n" in text  # no gain in speed told


def test_json_findings_follow_the_documented_schema(report):
    document = json.loads(renderer(Report, "json")(with_findings(report)))
    keys = {"id", "severity", "title", "evidence", "fix", "gain_pct", "gain_basis"}
    assert all(set(f) == keys for f in document["findings"])
    assert [(f["gain_pct"], f["gain_basis"]) for f in document["findings"]] == [
        (31.4, "up to"),
        (12.2, "predicted"),
        (4.04, "measured"),
        (None, "none"),
    ]


def test_json_follows_the_documented_schema(report):
    document = json.loads(renderer(Report, "json")(report))
    assert document["schema"] == "dlprof.report/1"
    assert set(document) >= {"run", "steps", "breakdown_ms", "loader", "gpu", "recommendation"}
    assert set(document["steps"]) >= {"count", "step_ms_mean", "step_ms_p50", "step_ms_p90"}
    assert set(document["breakdown_ms"]) == {"data_wait", "h2d", "forward", "backward", "optimizer", "other"}
    assert set(document["loader"]) >= {
        "batch_ms",
        "fetch_ms",
        "tokenize_ms",
        "collate_ms",
        "cpu_fraction",
        "workers_observed",
    }
    assert document["gpu"] is None  # a CPU trace
    recommendation = document["recommendation"]
    assert set(recommendation) >= {
        "num_workers",
        "pin_memory",
        "prefetch_factor",
        "persistent_workers",
        "bound",
        "verdict",
        "predicted",
        "evidence",
    }
    assert set(recommendation["predicted"][0]) >= {"num_workers", "step_ms", "steps_per_s"}
    assert sum(document["breakdown_ms"].values()) == pytest.approx(document["steps"]["step_ms_mean"], abs=0.01)


def test_json_trials_follow_the_documented_schema(reports):
    document = json.loads(renderer(Report, "json")(reports["tiny_trials"]))
    trials = document["trials"]
    assert (trials["mode"], trials["rounds"], trials["rounds_planned"]) == ("in-process", 2, 2)
    assert trials["basis"] == "over whole epochs" and isinstance(trials["notes"], list)
    assert set(trials["runs"][0]) == {
        "num_workers",
        "persistent_workers",
        "steps_per_s",
        "spread_pct",
        "width_scaled_pct",
        "epoch_steps_per_s",
        "restart_ms",
        "steps_timed",
        "trusted",
        "segments",
        "predicted_steps_per_s",
        "error_pct",
        "paced_steps_per_s",
        "paced_error_pct",
        "data_wait_pct",
        "workers_pss_mib",
        "over_memory_limit",
    }
    assert trials["max_worker_memory_mib"] is None and trials["padding"] is None
    # The recorded num_workers=1 sets the pace: its trials measured 34.72 steps/s over whole epochs, the model from the
    # reference steps 38.91; every paced prediction is the model's times their ratio.
    pace = trials["pace"]
    assert set(pace) == {
        "num_workers",
        "persistent_workers",
        "measured_steps_per_s",
        "predicted_steps_per_s",
        "from_reference_steps",
        "factor",
        "moved_pct",
    }
    assert (pace["num_workers"], pace["persistent_workers"], pace["from_reference_steps"]) == (1, False, True)
    assert pace["factor"] == pytest.approx(pace["measured_steps_per_s"] / pace["predicted_steps_per_s"], abs=1e-4)
    for run in trials["runs"]:
        assert run["paced_steps_per_s"] == pytest.approx(run["predicted_steps_per_s"] * pace["factor"], rel=1e-3)
        recorded = (run["num_workers"], run["persistent_workers"]) == (1, False)
        assert (run["paced_error_pct"] is None) == recorded
    assert [(r["num_workers"], r["persistent_workers"]) for r in trials["runs"]] == [
        (0, False),
        (1, False),
        (1, True),
        (2, False),
        (2, True),
    ]
    assert document["recommendation"]["rests_on"] == "measured"
    without = json.loads(renderer(Report, "json")(reports["tiny_dlprof"]))
    assert without["trials"] is None and without["recommendation"]["rests_on"] == "predicted"


def test_what_the_recommendation_rests_on_is_said_only_for_runs_with_trials(reports):
    line = "The recommended num_workers rests on measurement: num_workers=2 was tried in this training"
    for fmt in ("text", "markdown"):
        assert line in renderer(Report, fmt)(reports["tiny_trials"])
        assert "The recommended num_workers rests on" not in renderer(Report, fmt)(reports["tiny_dlprof"])
