"""`dlprof analyze` through the CLI: formats, output files, directories of runs, bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest
from conftest import DATA_DIR, assert_one_line_error, invoke

TINY = DATA_DIR / "tiny_dlprof_trace.json"


def test_text_report_to_the_terminal():
    result = invoke("analyze", str(TINY))
    assert result.exit_code == 0, result.output
    assert "HIGHLY input-bound" in result.stdout and "num_workers=1" in result.stdout


@pytest.mark.parametrize(
    ("suffix", "check"),
    [
        (".md", lambda t: t.startswith("**num_workers 1 -> 0: ") and "\n### dlprof: " in t),
        (".json", lambda t: json.loads(t)["schema"] == "dlprof.report/1"),
    ],
)
def test_format_follows_the_output_extension(tmp_path, suffix, check):
    out = tmp_path / f"report{suffix}"
    result = invoke("analyze", str(TINY), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert check(out.read_text()) and f"wrote {out}" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no partial file left beside it


def test_directory_of_runs_is_compared(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(TINY, tmp_path / name / "trace.json")
    result = invoke("analyze", str(tmp_path), "--format", "json")
    document = json.loads(result.stdout)
    assert [r["run"]["name"] for r in document["runs"]] == ["a", "b"]
    lines = invoke("analyze", str(tmp_path)).stdout.splitlines()
    # Each run's headline first, then the table.
    headline = document["runs"][0]["headline"]["text"]
    assert lines[:4] == [f"a: {headline}", f"b: {headline}", "", "Runs compared"]


def test_real_gpu_trace_from_another_tool():
    result = invoke("analyze", str(DATA_DIR / "hta_trace_diff_control.json.gz"), "--format", "json")
    document = json.loads(result.stdout)
    assert document["gpu"]["h2d_copies"] == 150 and document["loader"] is None
    assert document["run"]["num_workers"] is None  # unknown: no manifest


def test_analyze_does_not_import_torch():
    code = (
        f"import sys; from dlprof.cli import cli; cli(['analyze', {str(TINY)!r}], standalone_mode=False); print('torch'"
        " in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_one_step_trace_reports_what_it_cannot_compute(tmp_path):
    document = json.loads(TINY.read_text())
    document["traceEvents"] = [
        e
        for e in document["traceEvents"]
        if not (e.get("ts", 0) >= 1000 and e.get("ph") == "X" and e.get("cat") != "dlprof")
    ]
    one = tmp_path / "one.json"
    one.write_text(json.dumps(document))
    result = invoke("analyze", str(one))
    assert result.exit_code == 0, result.output
    assert "only 1 step(s) recorded" in result.stdout


def test_bad_input_empty_directory(tmp_path):
    assert_one_line_error(invoke("analyze", str(tmp_path)), str(tmp_path), "no trace files", "dlprof record")


def test_bad_input_not_json(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text("this is not json")
    assert_one_line_error(invoke("analyze", str(bad)), str(bad), "not JSON")


def test_bad_input_truncated_gzip(tmp_path):
    bad = tmp_path / "trace.json.gz"
    bad.write_bytes(gzip.compress(TINY.read_bytes())[:300])
    assert_one_line_error(invoke("analyze", str(bad)), str(bad), "truncated or corrupt gzip")


def test_bad_input_json_without_events(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text('{"hello": 1}')
    assert_one_line_error(invoke("analyze", str(bad)), "traceEvents")


def test_bad_input_no_profiler_steps(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}'
    )
    assert_one_line_error(invoke("analyze", str(bad)), "no ProfilerStep#N events", "prof.step()")


def test_bad_input_missing_path(tmp_path):
    assert_one_line_error(invoke("analyze", str(tmp_path / "nope")), "nope")


def test_bad_output_extension(tmp_path):
    assert_one_line_error(invoke("analyze", str(TINY), "-o", str(tmp_path / "report.pdf")), "report.pdf", "--format")
    assert list(tmp_path.iterdir()) == []


def test_bad_output_directory(tmp_path):
    assert_one_line_error(invoke("analyze", str(TINY), "-o", str(tmp_path / "missing" / "r.md")), "does not exist")


def test_output_onto_the_input_trace_is_refused_and_the_trace_kept(tmp_path):
    trace = tmp_path / "t.json"
    shutil.copy(TINY, trace)
    before = trace.read_bytes()
    assert_one_line_error(invoke("analyze", trace, "-o", trace), "is the input trace", "another file")
    assert_one_line_error(
        invoke("analyze", tmp_path, "-o", tmp_path / "." / "t.json", "--format", "text"), "is the input trace"
    )
    assert trace.read_bytes() == before


def test_output_into_proc_or_a_missing_directory_is_one_error(tmp_path):
    trace = tmp_path / "t.json"
    shutil.copy(TINY, trace)
    assert_one_line_error(invoke("analyze", trace, "-o", "/proc/dlprof-report.txt"), "/proc", "writable directory")
    assert_one_line_error(invoke("analyze", trace, "-o", tmp_path / "nope" / "r.txt"), "does not exist")
