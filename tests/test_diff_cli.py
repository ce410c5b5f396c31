"""`dlprof diff` through the CLI: the three formats, output files, and bad input (one line, exit code 2).

The two runs are the hand-written "before" (num_workers=1) and "after" (num_workers=2) of
tests/workflows/test_diff.py, whose docstring works out every number checked here.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
from conftest import DATA_DIR, assert_one_line_error, invoke
from workflows.test_diff import ROW_KEYS, before_after

from dlprof import __version__


@pytest.fixture
def runs(tmp_path):
    return before_after(tmp_path, version=2)


def test_text_to_the_terminal(runs):
    a, b = runs
    result = invoke("diff", a, b)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # Each side's headline first, as its own report leads with it.
    for side, run, line in zip("AB", (a, b), lines):
        headline = json.loads(invoke("analyze", run, "--format", "json").stdout)["headline"]["text"]
        assert line == f"{side} = {run.name}: {headline}"
    assert lines[2:4] == ["", f"dlprof diff: A = before  ({a / 'host_1.1.pt.trace.json'})"]
    assert "B is 25.0 % faster than A (unprofiled steps/s 2000.0 → 2500.0), data wait 0.20 → 0.04 ms per step" in lines
    settings = lines.index("Settings changed (A → B)")
    table = next(i for i, line in enumerate(lines) if line.startswith("  metric "))
    assert lines[table].split() == ["metric", "A", "B", "change", "change", "%"]
    assert settings < table
    assert "  num_workers: 1 → 2" in lines and "  prefetch_factor: 2 → 4" in lines
    assert "  command: python train.py --num-workers 1 → python train.py --num-workers 2" in lines
    body = {line.split("  ")[1]: line.split() for line in lines[table + 1 :]}
    assert body["step time, profiled mean (ms)"][-5:] == ["0.90", "0.65", "-0.25", "-27.8", "%"]
    assert body["steps/s, unprofiled"][-5:] == ["2000.00", "2500.00", "+500.00", "+25.0", "%"]
    assert body["worker memory (PSS MiB, all workers)"][-5:] == ["100.0", "185.0", "+85.0", "+85.0", "%"]
    assert len(body) == len(ROW_KEYS)


def test_markdown_table_with_settings_above_it(runs, tmp_path):
    a, b = runs
    out = tmp_path / "diff.md"
    result = invoke("diff", a, b, "-o", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stderr and result.stdout == ""
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("- **A = before: ") and lines[1].startswith("- **B = after: ")
    assert lines[2:4] == ["", "### dlprof diff: `before` → `after`"]
    assert (
        "**B is 25.0 % faster than A (unprofiled steps/s 2000.0 → 2500.0), data wait 0.20 → 0.04 ms per step**" in lines
    )
    header = lines.index("| metric | A | B | change | change % |")
    assert lines.index("- `num_workers`: `1` → `2`") < header
    assert "| data wait (ms per step) | 0.20 | 0.04 | -0.16 | -80.0 % |" in lines
    assert "| profiler overhead (%) | 80.0 | 62.5 | -17.5 | -21.9 % |" in lines
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["diff.md"]  # no partial file left beside it


def test_json_schema(runs, tmp_path):
    a, b = runs
    result = invoke("diff", a, b, "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert document["schema"] == "dlprof.diff/1" and document["dlprof_version"] == __version__
    for side, run in (("a", a), ("b", b)):  # each side leads with its own report's headline
        assert document[side]["headline"] == json.loads(invoke("analyze", run, "--format", "json").stdout)["headline"]
    headline = document["a"].pop("headline")
    assert set(headline) == {"text", "change", "gain_pct", "basis"}
    assert document["a"] == {"name": "before", "trace_file": str(a / "host_1.1.pt.trace.json")}
    assert document["b"]["name"] == "after"
    assert document["settings_changed"] == {
        "num_workers": [1, 2],
        "prefetch_factor": [2, 4],
        "command": [["python", "train.py", "--num-workers", "1"], ["python", "train.py", "--num-workers", "2"]],
    }
    assert [r["key"] for r in document["rows"]] == ROW_KEYS
    for row in document["rows"]:
        assert {"metric", "a", "b", "delta", "delta_pct"} <= row.keys()
        assert all(v is None or math.isfinite(v) for v in (row["a"], row["b"], row["delta"], row["delta_pct"]))
    step = document["rows"][0]
    assert (step["metric"], step["a"], step["b"], step["delta"], step["delta_pct"]) == (
        "step time, profiled mean (ms)",
        0.9,
        0.65,
        -0.25,
        -27.78,
    )
    assert document["speed_basis"] == "unprofiled steps/s" and document["speed_change_pct"] == 25.0


def test_json_unknown_is_null(tmp_path):
    a, b = before_after(tmp_path, version=1)
    out = tmp_path / "out.json"
    assert invoke("diff", a, b, "-o", out).exit_code == 0
    rows = {r["key"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["unprofiled_steps_per_s"] == {
        **rows["unprofiled_steps_per_s"],
        "a": None,
        "b": None,
        "delta": None,
        "delta_pct": None,
    }
    assert "NaN" not in out.read_text() and "Infinity" not in out.read_text()


def test_missing_path(runs, tmp_path):
    a, _ = runs
    assert_one_line_error(invoke("diff", a, tmp_path / "nope"), "nope", "does not exist")


def test_directory_of_several_runs(runs, tmp_path):
    a, _ = runs
    assert_one_line_error(invoke("diff", tmp_path, a), str(tmp_path), "2 runs", "give one run directory")


def test_output_naming_an_input(runs):
    a, b = runs
    trace = a / "host_1.1.pt.trace.json"
    before = trace.read_bytes()
    assert_one_line_error(invoke("diff", trace, b, "-o", trace), "is the input trace", "another file")
    assert trace.read_bytes() == before
    assert_one_line_error(invoke("diff", a, b, "-o", a / "diff.json"), "run directory")
    assert_one_line_error(invoke("diff", a, b, "-o", a), "directory")  # Click: -o takes a file


def test_html_is_not_a_diff_format(runs, tmp_path):
    a, b = runs
    assert_one_line_error(invoke("diff", a, b, "-o", tmp_path / "diff.html"), "text, markdown, json")


def test_diff_does_not_import_torch(runs):
    a, b = runs
    code = (
        f"import sys; from dlprof.cli import cli; cli(['diff', {str(a)!r}, {str(b)!r}], standalone_mode=False);"
        " print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_run_of_several_ranks_says_which_rank_it_compares(tmp_path):
    a, b = (shutil.copytree(DATA_DIR / "ranks", tmp_path / side) for side in ("a", "b"))
    analyzed = json.loads(invoke("analyze", a, "--format", "json").stdout)
    slowest = analyzed["ranks"]["slowest_rank"]
    assert slowest == 1 and analyzed["run"]["trace_file"].endswith("rank1.json")
    text = invoke("diff", a, b)
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[3] == (
        f"dlprof diff: A = a  ({analyzed['run']['trace_file']}; rank 1 of 2: the slowest, which dlprof analyze reports)"
    )
    document = json.loads(invoke("diff", a, b, "--format", "json").stdout)
    assert document["a"] == {
        "name": "a",
        "trace_file": analyzed["run"]["trace_file"],
        "headline": analyzed["headline"],
        "rank": slowest,
        "ranks": 2,
    }
    markdown = invoke("diff", a, b, "--format", "markdown").stdout
    assert "B: `" + str(b / "rank1.json") + "`, rank 1 of 2: the slowest, which dlprof analyze reports" in markdown
