"""The merged trace's track layout: what would partly overlap moves to a track of its own, every track is named, and
the analysis reads the same numbers as before."""

from __future__ import annotations

import copy
import json

from conftest import DATA_DIR
from trace_checks import trace_problems

from dlprof.capture import tracks
from dlprof.core import schema
from dlprof.trace.build import build_run
from dlprof.workflows.analyze import analyze_run

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def x(name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def main_thread(*events: dict) -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}},
        *events,
    ]


def laid_out(events: list[dict]) -> list[dict]:
    events.extend(tracks.untangle(events))
    events.extend(tracks.name_tracks(events, {}))
    return events


def tid_of(events: list[dict], name: str) -> int:
    return next(e["tid"] for e in events if e.get("ph") == "X" and e["name"] == name)


def test_an_optimizer_step_across_profiler_steps_gets_a_named_track_of_its_own():
    # dlprof steps the profiler from the optimizer's post-hook: Kineto's Optimizer.step#... ends in the next step.
    events = laid_out(
        main_thread(
            x("ProfilerStep#1", 0, 100, cat="user_annotation"),
            x("Optimizer.step#AdamW.step", 90, 20, cat="user_annotation"),
            x("aten::add_", 92, 5),
            x("ProfilerStep#2", 100, 100, cat="user_annotation"),
        )
    )
    assert not trace_problems({"traceEvents": events})
    moved = tid_of(events, "Optimizer.step#AdamW.step")
    assert moved == tracks.OVERLAP_TID_BASE
    assert {tid_of(events, n) for n in ("ProfilerStep#1", "ProfilerStep#2", "aten::add_")} == {1}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[(1, moved)] == "thread 1 (python) (overlapping)"


def test_a_movable_event_leaves_when_one_of_kinetos_starts_inside_it_and_ends_after():
    events = laid_out(main_thread(x(NEXT, 0, 100), x("aten::mm", 50, 100)))
    assert (tid_of(events, NEXT), tid_of(events, "aten::mm")) == (tracks.OVERLAP_TID_BASE, 1)
    assert not trace_problems({"traceEvents": events})


def test_overlapping_spans_of_one_worker_take_as_few_tracks_as_nest_them():
    spans = [x(f"batch {i}", 10 * i, 25, pid=5, tid=5, cat=schema.CATEGORY) for i in range(4)]
    events = laid_out(spans)
    assert not trace_problems({"traceEvents": events})
    assert [e["tid"] for e in spans[:4]] == [5, tracks.OVERLAP_TID_BASE, tracks.OVERLAP_TID_BASE + 1, 5]
    names = sorted(e["args"]["name"] for e in events if e["name"] == "thread_name")
    assert names == ["thread 5", "thread 5 (overlapping)", "thread 5 (overlapping) 2"]


def test_nested_events_stay_where_they_are_and_kinetos_own_overlaps_are_left():
    nested = main_thread(x("ProfilerStep#1", 0, 100), x("aten::mm", 10, 20), x(NEXT, 30, 10), x("aten::add", 40, 60))
    before = copy.deepcopy(nested)
    assert laid_out(nested) == before
    crossing = main_thread(x("ProfilerStep#1", 0, 100), x("aten::mm", 90, 20))
    assert laid_out(crossing) == main_thread(x("ProfilerStep#1", 0, 100), x("aten::mm", 90, 20))


def test_unnamed_processes_and_threads_are_named_strings_and_global_instants_left_alone():
    events = [
        x("a", 0, 1, pid=7, tid=8),
        {"ph": "C", "name": "memory (MiB)", "pid": 9, "tid": 9, "ts": 0, "args": {"uss_mib": 1.0}},
        x("PyTorch Profiler (0)", 0, 10, pid="Spans", tid="PyTorch Profiler"),  # type: ignore[arg-type]
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 5},
    ]
    added = tracks.name_tracks(events, {9: "DataLoader worker 0 (pid 9)"})
    assert [(e["name"], e["pid"], e["tid"], e["args"]["name"]) for e in added] == [
        ("process_name", 7, 0, "process 7"),
        ("process_name", 9, 0, "DataLoader worker 0 (pid 9)"),
        ("thread_name", 7, 8, "thread 8"),
    ]
    assert not trace_problems({"traceEvents": events + added})


def test_the_analysis_reads_the_same_numbers_after_the_layout():
    document = json.loads((DATA_DIR / "tiny_dlprof_trace.json").read_text())
    events = document["traceEvents"]
    step = next(e for e in events if e["name"] == "Optimizer.step#AdamW.step")
    step["dur"] = 200  # from 900 into ProfilerStep#6
    batch = next(e for e in events if e["name"] == "batch" and e["args"][schema.ARG_BATCH] == 6)
    batch["ts"] = -300  # starts inside batch 5 and ends after it
    assert trace_problems(document).overlaps
    untangled = copy.deepcopy(document)
    laid_out(untangled["traceEvents"])
    assert not trace_problems(untangled).overlaps
    path = DATA_DIR / "tiny_dlprof_trace.json"
    before, after = (analyze_run(build_run(d, path, "tiny")) for d in (document, untangled))
    assert after == before
