"""The report of a job of many ranks: up to RANKS_TABLE_MAX ranks the per-rank table, beyond it the summary.

The jobs are written by tests/many_ranks.py (hand-made traces, every number set there).
``UPDATE_GOLDEN=1 python -m pytest tests/report/test_many_ranks.py`` rewrites the golden files; review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import DATA_DIR
from many_ranks import uniform_job

from dlprof.report import renderer
from dlprof.results.report import Report
from dlprof.workflows.analyze import build_report

GOLDEN_DIR = DATA_DIR / "golden"
EXTENSIONS = {"text": "txt", "markdown": "md", "json": "json", "html": "html"}
#: Golden file stem -> (ranks, ranks per node, the slow ranks: rank -> (extra data µs, extra compute µs)).
JOBS = {
    "ranks4": (4, 2, {2: (300, 0)}),
}


def _report(tmp_path: Path, stem: str) -> Report:
    ranks, per_node, slow = JOBS[stem]
    uniform_job(tmp_path / "job", ranks, per_node, slow)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # relative paths in the report: the golden files do not depend on where the test runs
    try:
        return build_report(Path("job"))
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return {stem: _report(tmp_path_factory.mktemp(stem), stem) for stem in JOBS}


@pytest.mark.parametrize("stem", sorted(JOBS))
@pytest.mark.parametrize("fmt", sorted(EXTENSIONS))
def test_renderer_matches_golden_file(reports, stem, fmt):
    rendered = renderer(Report, fmt)(reports[stem])
    golden = GOLDEN_DIR / f"{stem}.{EXTENSIONS[fmt]}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")
