"""The Perfetto checks of tests/trace_checks.py, each shown failing on a tiny document that breaks its rule."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from trace_checks import assert_perfetto_clean, partial_overlaps, trace_problems, unnamed_tracks


def x(name: str, ts: float, dur: float, pid: int | str = 1, tid: int | str = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def named(*events: dict) -> dict:
    """A document of ``events`` with process 1 and its threads 1 and 2 named."""
    return {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "other"}},
            *events,
        ]
    }


def test_nested_slices_and_equal_boundaries_are_clean():
    document = named(
        x("outer", 0, 100),
        x("same extent", 0, 100),
        x("child at the start", 0, 40),
        x("child touching the end", 40, 60),
        x("zero length at the end", 100, 0),
        x("next", 100, 50),
        x("another thread crossing", 90, 30, tid=2),
    )
    assert not trace_problems(document)


def test_a_slice_that_starts_inside_another_and_ends_after_it_is_reported_with_both():
    document = named(x("ProfilerStep#1", 0, 100), x("Optimizer.step#AdamW.step", 90, 20), x("inside", 10, 5))
    [overlap] = partial_overlaps(document)
    assert (overlap.pid, overlap.tid) == (1, 1)
    assert (overlap.first["name"], overlap.second["name"]) == ("ProfilerStep#1", "Optimizer.step#AdamW.step")
    assert "partly overlaps" in str(overlap)


def test_a_nanosecond_of_overlap_counts():
    # Kineto writes µs with 3 decimals: 0.001 past the end is a real nanosecond, not float noise.
    assert partial_overlaps(named(x("a", 1.5, 1.0), x("b", 2.0, 0.501)))
    assert not partial_overlaps(named(x("a", 1.5, 1.0), x("b", 2.0, 0.5)))


def test_unnamed_processes_and_threads_are_reported():
    document = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
            x("on an unnamed thread", 0, 1),
            x("in an unnamed process", 0, 1, pid=7, tid=7),
            {"ph": "C", "name": "memory (MiB)", "pid": 8, "tid": 8, "ts": 0, "args": {"uss_mib": 1.0}},
        ]
    }
    assert [str(t) for t in unnamed_tracks(document)] == [
        "thread (1, 1) has no thread_name",
        "process 7 has no process_name",
        "thread (7, 7) has no thread_name",
        "process 8 has no process_name",
    ]


def test_string_ids_and_global_instants_need_no_name():
    # Kineto's own: Perfetto names a track whose id is a string by that string; a global instant draws on no track.
    document = {
        "traceEvents": [
            x("PyTorch Profiler (0)", 0, 10, pid="Spans", tid="PyTorch Profiler"),
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 5},
        ]
    }
    assert not unnamed_tracks(document)


def _write(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    return path


def test_assert_perfetto_clean_walks_a_directory_and_names_the_file(tmp_path):
    _write(tmp_path / "run" / "a.pt.trace.json.gz", named(x("a", 0, 10)))
    assert assert_perfetto_clean(tmp_path) == 1
    bad = _write(tmp_path / "run" / "b.pt.trace.json.gz", named(x("a", 0, 10), x("b", 5, 10)))
    with pytest.raises(AssertionError, match="b.pt.trace.json.gz"):
        assert_perfetto_clean(tmp_path)
    with pytest.raises(AssertionError, match="partly overlaps"):
        assert_perfetto_clean(bad)
    with pytest.raises(AssertionError, match="no trace"):
        assert_perfetto_clean(tmp_path / "empty")
