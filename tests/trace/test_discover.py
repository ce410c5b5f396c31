"""Run discovery: run directories with stray files, directories of runs with bad runs, names that are not UTF-8."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from conftest import DATA_DIR, assert_one_line_error, invoke, render_all, write_json

import dlprof
from dlprof.core.errors import DlprofError
from dlprof.report import FORMATS, renderer
from dlprof.results.report import Report
from dlprof.trace.discover import find_traces

TINY = DATA_DIR / "tiny_dlprof_trace.json"
CUDA = DATA_DIR / "tiny_cuda_trace.json"


def _doc(path: Path = TINY) -> dict:
    return json.loads(path.read_text())


def test_a_report_in_a_run_directory_is_not_taken_for_a_trace(tmp_path):
    run = tmp_path / "run"
    trace = write_json(run / "host_1.1.pt.trace.json", _doc())
    assert invoke("analyze", run, "-o", run / "report.json").exit_code == 0
    assert find_traces(run) == [[trace]]
    again = invoke("analyze", run, "-o", run / "report.json")
    assert again.exit_code == 0, again.output
    assert dlprof.analyze(run).skipped == []


def test_a_stray_json_beside_a_plain_trace_is_skipped_with_a_note(tmp_path):
    run = tmp_path / "run"
    write_json(run / "trace.json", _doc())
    (run / "notes.json").write_text('{"note": "baseline"}')
    report = dlprof.analyze(run)
    assert len(report.runs) == 1 and [s.path for s in report.skipped] == [str(run / "notes.json")]
    assert "not a trace" in report.skipped[0].reason
    for fmt in FORMATS:
        assert "notes.json" in renderer(Report, fmt)(report)
    assert json.loads(renderer(Report, "json")(report))["skipped"][0]["path"] == str(run / "notes.json")


def test_a_directory_of_runs_reports_the_readable_ones_and_names_the_others(tmp_path):
    write_json(tmp_path / "good" / "a.pt.trace.json", _doc())
    write_json(tmp_path / "good2" / "a.pt.trace.json", _doc(CUDA))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    write_json(tmp_path / "nosteps" / "a.pt.trace.json", {"traceEvents": []})
    report = dlprof.analyze(tmp_path)
    assert [r.info.name for r in report.runs] == ["good", "good2"]
    assert sorted(Path(s.path).name for s in report.skipped) == ["broken", "nosteps"]
    text = renderer(Report, "text")(report)
    assert sum(line.startswith("skipped ") for line in text.splitlines()) == 2
    render_all(report)


def test_a_directory_of_unreadable_runs_is_one_error(tmp_path):
    for name in ("a", "b"):
        write_json(tmp_path / name / "x.pt.trace.json", {"traceEvents": []})
    with pytest.raises(DlprofError, match="none of its 2 runs could be read"):
        dlprof.analyze(tmp_path)
    assert_one_line_error(invoke("analyze", tmp_path), "none of its 2 runs could be read")


def test_an_unreadable_run_is_skipped(tmp_path, monkeypatch):
    write_json(tmp_path / "good" / "a.pt.trace.json", _doc())
    locked = write_json(tmp_path / "locked" / "a.pt.trace.json", _doc())
    real = Path.open

    def open_(self, *args, **kwargs):
        if self == locked:
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)  # as root, chmod 000 would not stop the read
    report = dlprof.analyze(tmp_path)
    assert [r.info.name for r in report.runs] == ["good"] and "Permission denied" in report.skipped[0].reason
    assert_one_line_error(invoke("analyze", locked), "Permission denied", "permissions")


@pytest.mark.skipif(os.name != "posix", reason="bytes file names")
def test_a_run_directory_name_that_is_not_utf8(tmp_path):
    root = os.fsencode(tmp_path)
    run = os.fsdecode(root + b"/run-\xff\xfe")
    write_json(Path(run) / "a.pt.trace.json", _doc())
    report = dlprof.analyze(tmp_path)
    assert report.runs[0].info.name == "run-\ufffd\ufffd"
    render_all(report)
    result = invoke("analyze", tmp_path)
    assert result.exit_code == 0 and "run-\ufffd\ufffd" in result.output
    broken = Path(run) / "b"
    write_json(broken / "a.pt.trace.json", {"traceEvents": []})
    assert_one_line_error(invoke("analyze", broken), "\ufffd")
