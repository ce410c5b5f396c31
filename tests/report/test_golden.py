"""Every text renderer against a golden file, on the hand-written dlprof trace.

``UPDATE_GOLDEN=1 python -m pytest tests/report/test_golden.py`` rewrites the files; review the diff.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import DATA_DIR, TESTS_DIR

from dlprof.report import renderer
from dlprof.results.report import Report
from dlprof.workflows.analyze import build_report

GOLDEN_DIR = DATA_DIR / "golden"
CASES = {
    "text": "tiny_dlprof.txt",
    "markdown": "tiny_dlprof.md",
    "json": "tiny_dlprof.json",
    "html": "tiny_dlprof.html",
}


@pytest.fixture(scope="module")
def report():
    # A relative path, so that the golden files do not depend on where the repository is.
    cwd = os.getcwd()
    os.chdir(TESTS_DIR.parent)
    try:
        return build_report(DATA_DIR.relative_to(TESTS_DIR.parent) / "tiny_dlprof_trace.json")
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_renderer_matches_golden_file(report, fmt):
    rendered = renderer(Report, fmt)(report)
    golden = GOLDEN_DIR / CASES[fmt]
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")


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
