"""Run directories written node by node (``dlprof analyze node0/job node1/job``), recognised from the manifests'
``job``; and the ranks of a job that left no trace, named in every format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from conftest import DATA_DIR, assert_one_line_error, invoke

import dlprof
from dlprof.trace.discover import find_job_runs, trace_job
from dlprof.workflows.analyze import build_report

RANKS = DATA_DIR / "ranks"


def _node_trace(run_dir: Path, rank: int, job: str | None, world_size: int = 2, gz: bool = True) -> Path:
    """Rank ``rank`` of the two-rank test job, with a manifest (before the events, as dlprof writes it)."""
    document = json.loads((RANKS / f"rank{rank}.json").read_text())
    manifest = {"manifest_version": 4, "status": "complete", "rank": rank, "world_size": world_size, "job": job}
    events = document.pop("traceEvents")
    text = json.dumps({**document, "dlprof": manifest, "traceEvents": events}).encode()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"host{rank}_{100 + rank}.1.pt.trace.json{'.gz' if gz else ''}"
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def test_the_job_is_read_from_the_head_of_a_trace(tmp_path):
    assert trace_job(_node_trace(tmp_path / "a", 0, "rdzv-id=j")) == "rdzv-id=j"
    assert trace_job(_node_trace(tmp_path / "b", 0, "rdzv-id=j", gz=False)) == "rdzv-id=j"
    assert trace_job(_node_trace(tmp_path / "c", 0, None)) is None
    assert trace_job(RANKS / "rank0.json") is None  # no manifest
    assert trace_job(DATA_DIR / "tiny_dlprof_trace.json") is None  # manifest version 2: no job
    (tmp_path / "broken.pt.trace.json.gz").write_bytes(b"\x1f\x8b not gzip")
    assert trace_job(tmp_path / "broken.pt.trace.json.gz") is None


def test_the_nodes_run_directories_are_one_run(tmp_path):
    a = _node_trace(tmp_path / "node0" / "job", 0, "rdzv-id=j")
    b = _node_trace(tmp_path / "node1" / "job", 1, "rdzv-id=j")
    assert find_job_runs([tmp_path / "node0" / "job", tmp_path / "node1" / "job"]) == ([[a, b]], [])
    (run,) = dlprof.analyze([tmp_path / "node0" / "job", tmp_path / "node1" / "job"]).runs
    assert run.info.name == "job" and [r.rank for r in run.ranks.ranks] == [0, 1]
    assert run.missing_ranks == ()
    done = invoke("analyze", tmp_path / "node0" / "job", tmp_path / "node1" / "job", "--format", "json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert [r["rank"] for r in document["ranks"]["ranks"]] == [0, 1] and document["missing_ranks"] == []


def test_directories_of_different_jobs_are_refused_in_one_line(tmp_path):
    _node_trace(tmp_path / "a" / "job", 0, "rdzv-id=j")
    _node_trace(tmp_path / "b" / "job", 1, "rdzv-id=k")
    _node_trace(tmp_path / "c" / "job", 1, None)
    done = invoke("analyze", tmp_path / "a" / "job", tmp_path / "b" / "job")
    assert_one_line_error(done, "a/job (job rdzv-id=j), ", "b/job (job rdzv-id=k): not the nodes of one job")
    done = invoke("analyze", tmp_path / "a" / "job", tmp_path / "c" / "job")
    assert_one_line_error(done, "c/job (no job in its manifest)", "analyze each alone")
    _node_trace(tmp_path / "many" / "x", 0, "rdzv-id=j")
    _node_trace(tmp_path / "many" / "y", 1, "rdzv-id=j")
    done = invoke("analyze", tmp_path / "a" / "job", tmp_path / "many")
    assert_one_line_error(done, "many: holds 2 runs; give the run directories of one job")


def test_a_missing_rank_is_named_and_the_report_made_from_the_others(tmp_path):
    _node_trace(tmp_path / "node0" / "job", 0, "rdzv-id=j", world_size=4)
    _node_trace(tmp_path / "node1" / "job", 1, "rdzv-id=j", world_size=4)
    paths = [tmp_path / "node0" / "job", tmp_path / "node1" / "job"]
    report = dlprof.analyze(paths)
    (run,) = report.runs
    assert run.missing_ranks == (2, 3) and [r.rank for r in run.ranks.ranks] == [0, 1]
    assert build_report(paths, processes=2) == report  # worker processes: the same report
    text = invoke("analyze", *paths)
    assert text.exit_code == 0, text.output
    assert "note: missing ranks 2-3: no trace of them here" in text.stdout
    for fmt in ("markdown", "html"):
        assert "missing ranks 2-3" in invoke("analyze", *paths, "--format", fmt).stdout
    assert json.loads(invoke("analyze", *paths, "--format", "json").stdout)["missing_ranks"] == [2, 3]
    # One node's directory alone: the other node's rank is named, the report is rank 0's.
    (alone,) = dlprof.analyze(tmp_path / "node0" / "job").runs
    assert alone.missing_ranks == (1, 2, 3) and alone.ranks is None


def test_a_rank_given_twice_is_used_once_and_the_other_named(tmp_path):
    first = _node_trace(tmp_path / "node0" / "job", 0, "rdzv-id=j")
    _node_trace(tmp_path / "node1" / "job", 1, "rdzv-id=j")
    again = _node_trace(tmp_path / "copy" / "job", 0, "rdzv-id=j")  # node 0's directory copied, given as well
    paths = [tmp_path / "node0" / "job", tmp_path / "node1" / "job", tmp_path / "copy" / "job"]
    report = dlprof.analyze(paths)
    (run,) = report.runs
    assert [r.rank for r in run.ranks.ranks] == [0, 1] and run.missing_ranks == ()
    (skipped,) = report.skipped
    assert skipped.path.endswith(again.name) and f"a second trace of rank 0: left out ({first}" in skipped.reason
    text = invoke("analyze", *paths)
    assert text.exit_code == 0 and "a second trace of rank 0: left out" in text.stdout
