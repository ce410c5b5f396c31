"""The merge of a Kineto trace, span files and memory samples, on hand-written inputs with exact numbers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dlprof.capture import merge, spanfile
from dlprof.capture.memory import MemoryReading
from dlprof.capture.session import spans_dir_of
from dlprof.core import schema
from dlprof.core.manifest import Host, LoaderConfig, Schedule, StepClock, WorkerStart, parse_manifest
from dlprof.results.record import ClockReading, RankResult

BASE_NS = 1_700_000_000_000_000_000
MAIN_PID, WORKER_PID = 100, 201
MIB = 2**20


def kineto_trace() -> dict:
    """Two steps; each starts with a DataLoader __next__ (ts in µs since BASE_NS)."""
    next_name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#3",
                "pid": MAIN_PID,
                "tid": MAIN_PID,
                "ts": 1000.0,
                "dur": 1000.0,
            },
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": next_name,
                "pid": MAIN_PID,
                "tid": MAIN_PID,
                "ts": 1002.5,
                "dur": 300.0,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": MAIN_PID,
                "tid": MAIN_PID,
                "ts": 1400.0,
                "dur": 500.0,
            },
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#4",
                "pid": MAIN_PID,
                "tid": MAIN_PID,
                "ts": 2000.0,
                "dur": 1000.0,
            },
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": next_name,
                "pid": MAIN_PID,
                "tid": MAIN_PID,
                "ts": 2003.0,
                "dur": 100.0,
            },
        ],
    }


def us(t: float) -> int:
    """µs since BASE_NS -> absolute ns."""
    return BASE_NS + int(t * 1000)


def span_records() -> bytes:
    """Worker 0 produced batches 3 and 4; batch 1 ended long before the window; the last record is cut short."""
    code = spanfile.SPAN_CODE
    rows = [
        (spanfile.KIND_WORKER, 0, us(10), 0, 0, 0, 0, 0, 2, 0),
        (spanfile.KIND_SPAN, code["batch"], us(20), us(30), 9000, 0, 0, 0, 1, 0),
        (spanfile.KIND_SPAN, code["batch"], us(500), us(1200), 600_000, 40_000, 0, 0, 3, 0),
        (spanfile.KIND_SPAN, code["dataset fetch"], us(500), us(1100), 500_000, 0, 0, 0, 3, 0),
        (spanfile.KIND_SPAN, code["tokenizer"], us(600), us(700), 90_000, 0, 0, 0, 3, 0),
        (spanfile.KIND_SPAN, code["collate_fn"], us(1100), us(1200), 100_000, 0, 0, 0, 3, 0),
        (spanfile.KIND_SPAN, code["batch"], us(1500), us(2050), 400_000, 0, 0, 0, 4, 0),
    ]
    return b"".join(spanfile.RECORD.pack(*row) for row in rows) + spanfile.RECORD.pack(*rows[-1])[:20]


def main_records() -> bytes:
    """The main process timed the two __next__ calls that returned batches 3 and 4."""
    rows = [
        (spanfile.KIND_NEXT, 0, us(1000), us(1304), 0, 0, 0, 0, 3, -1),
        (spanfile.KIND_NEXT, 0, us(2001), us(2110), 0, 0, 0, 0, 4, -1),
    ]
    return b"".join(spanfile.RECORD.pack(*row) for row in rows)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    spans = spans_dir_of(tmp_path, MAIN_PID)  # the training process's spans and its workers'
    spans.mkdir(parents=True)
    (spans / f"{WORKER_PID}.spans").write_bytes(span_records())
    (spans / f"{MAIN_PID}.spans").write_bytes(main_records())
    return tmp_path


def result() -> RankResult:
    return RankResult(
        status=schema.STATUS_COMPLETE,
        error=None,
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        process_argv=("python", "t.py"),
        pid=MAIN_PID,
        trace_file="kineto.json",
        export_error=None,
        steps_run=9,
        schedule=Schedule(2, 2, 2, step_mode="optimizer"),
        window_start_ns=BASE_NS + 400_000,
        window_clock=(),
        step_clock=StepClock(),
        stopped_early=False,
        finished_ns=BASE_NS + 5_000_000,
        loaders=(LoaderConfig(id=0, iterations=1, batches=9, num_workers=2),),
        host=Host(hostname="h", usable_cores=2),
        versions={"dlprof": "0.1.0"},
    )


def merged(session: Path, samples: list[MemoryReading] | None = None) -> dict:
    inputs = merge.MergeInputs(
        session_dir=session,
        command=("dlprof", "record"),
        script=("python", "t.py"),
        exit_code=0,
        memory_samples=samples or [],
        memory_interval_ms=100,
    )
    return merge.trace_document(*merge.merge_rank(kineto_trace(), result(), inputs))


def test_read_span_files_parses_each_kind_and_counts_broken_records(session):
    found = spanfile.read_span_files(spans_dir_of(session, MAIN_PID))
    assert found.workers == [WorkerStart(pid=WORKER_PID, worker_id=0, loader=0, epoch=0, start_ns=us(10))]
    assert len(found.spans) == 6
    assert [c.batch for c in found.next_calls] == [3, 4]
    assert found.skipped_records == 1


def test_next_events_get_their_batch_and_become_cpu_op(session):
    doc = merged(session)
    nexts = [e for e in doc["traceEvents"] if schema.is_dataloader_next(e["name"])]
    assert [e["args"][schema.ARG_BATCH] for e in nexts] == [3, 4]
    assert all(e["cat"] == "cpu_op" and e["args"][schema.ARG_ORIGINAL_CATEGORY] == "user_annotation" for e in nexts)


def test_alignment_slack_is_measured_in_microseconds(session):
    alignment = merged(session)[schema.MANIFEST_KEY]["clock"]["alignment"]
    # Kineto's events start 2.5 and 2.0 µs after dlprof's spans, and end 1.5 and 7.0 µs before them.
    assert alignment["next_events_matched"] == 2
    assert alignment["start_slack_us"] == {"min": 2.0, "median": 2.25, "max": 2.5}
    assert alignment["end_slack_us"] == {"min": 1.5, "median": 4.25, "max": 7.0}
    assert alignment["max_offset_us"] == 0.0


def test_a_next_event_outside_every_span_stays_unmatched(session):
    (spans_dir_of(session, MAIN_PID) / f"{MAIN_PID}.spans").write_bytes(main_records()[: spanfile.RECORD.size])
    alignment = merged(session)[schema.MANIFEST_KEY]["clock"]["alignment"]
    assert alignment["next_events_matched"] == 1
    assert alignment["next_events_unmatched"] == 1


def test_worker_spans_become_a_named_process_on_kineto_clock(session):
    events = merged(session)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {WORKER_PID: f"DataLoader worker 0 (pid {WORKER_PID})", MAIN_PID: f"process {MAIN_PID}"}
    spans = [e for e in events if e.get("cat") == schema.CATEGORY and e["ph"] == "X"]
    # batch 1 ended before the window and no traced __next__ returned it: left out.
    assert sorted((e["name"], e["args"][schema.ARG_BATCH]) for e in spans) == [
        ("batch", 3),
        ("batch", 4),
        ("collate_fn", 3),
        ("dataset fetch", 3),
        ("tokenizer", 3),
    ]
    fetch = next(e for e in spans if e["name"] == "dataset fetch")
    assert (fetch["pid"], fetch["tid"], fetch["ts"], fetch["dur"]) == (WORKER_PID, WORKER_PID, 500.0, 600.0)
    assert fetch["args"][schema.ARG_CPU_US] == 500.0
    assert schema.ARG_RUNQ_US not in fetch["args"]
    whole = next(e for e in spans if e["name"] == "batch" and e["args"][schema.ARG_BATCH] == 3)
    assert whole["args"][schema.ARG_RUNQ_US] == 40.0


def test_batch_consumed_in_window_is_kept_even_if_produced_before(session):
    early = spanfile.RECORD.pack(spanfile.KIND_SPAN, spanfile.SPAN_CODE["batch"], us(100), us(200), 1, 0, 0, 0, 3, 0)
    late = spanfile.RECORD.pack(spanfile.KIND_SPAN, spanfile.SPAN_CODE["batch"], us(100), us(200), 1, 0, 0, 0, 7, 0)
    (spans_dir_of(session, MAIN_PID) / f"{WORKER_PID}.spans").write_bytes(early + late)
    spans = [e for e in merged(session)["traceEvents"] if e.get("cat") == schema.CATEGORY and e["name"] == "batch"]
    # batch 3 was returned by a traced __next__; batch 7 was not
    assert [(e["args"][schema.ARG_BATCH], e["ts"]) for e in spans] == [(3, 100.0)]


def test_memory_counters_inside_window_and_summary_over_whole_run(session):
    samples = [
        MemoryReading(
            time_ns=BASE_NS + 50_000, pid=MAIN_PID, uss_bytes=90 * MIB, pss_bytes=100 * MIB, rss_bytes=190 * MIB
        ),  # before the window, superseded
        MemoryReading(
            time_ns=BASE_NS + 100_000, pid=MAIN_PID, uss_bytes=100 * MIB, pss_bytes=110 * MIB, rss_bytes=200 * MIB
        ),  # the last before the window
        MemoryReading(
            time_ns=BASE_NS + 1_500_000, pid=MAIN_PID, uss_bytes=120 * MIB, pss_bytes=130 * MIB, rss_bytes=220 * MIB
        ),
        MemoryReading(
            time_ns=BASE_NS + 1_500_000, pid=WORKER_PID, uss_bytes=10 * MIB, pss_bytes=50 * MIB, rss_bytes=150 * MIB
        ),
        MemoryReading(
            time_ns=BASE_NS + 2_500_000, pid=WORKER_PID, uss_bytes=14 * MIB, pss_bytes=52 * MIB, rss_bytes=151 * MIB
        ),
        MemoryReading(
            time_ns=BASE_NS + 1_500_000, pid=999, uss_bytes=1 * MIB, pss_bytes=1 * MIB, rss_bytes=1 * MIB
        ),  # not a process of the run
    ]
    doc = merged(session, samples)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    # Sampling is sparse: each track starts with its process's last reading before the window.
    assert [(e["pid"], e["ts"], e["args"]) for e in counters] == [
        (MAIN_PID, 100.0, {"uss_mib": 100.0, "pss_mib": 110.0}),
        (MAIN_PID, 1500.0, {"uss_mib": 120.0, "pss_mib": 130.0}),
        (WORKER_PID, 1500.0, {"uss_mib": 10.0, "pss_mib": 50.0}),
        (WORKER_PID, 2500.0, {"uss_mib": 14.0, "pss_mib": 52.0}),
    ]
    processes = {p["pid"]: p for p in doc[schema.MANIFEST_KEY]["memory"]["processes"]}
    assert set(processes) == {MAIN_PID, WORKER_PID}
    assert (processes[MAIN_PID]["uss_mib_first"], processes[MAIN_PID]["uss_mib_last"]) == (90.0, 120.0)
    assert (processes[WORKER_PID]["role"], processes[WORKER_PID]["worker_id"]) == ("worker", 0)
    assert processes[WORKER_PID]["pss_mib_peak"] == 52.0


def test_manifest_and_rank_come_before_the_events(session):
    doc = merged(session)
    keys = list(doc)
    assert keys[-1] == "traceEvents"
    assert doc["distributedInfo"]["rank"] == 0
    manifest = doc[schema.MANIFEST_KEY]
    assert manifest["status"] == "complete"
    assert manifest["steps"] == {"run": 9, "recorded": 2}
    assert manifest["loader"]["num_workers"] == 2
    assert manifest["schedule"]["step_mode"] == "optimizer"
    assert manifest["span_records_skipped"] == 1


def test_atomic_write_leaves_only_the_final_file(tmp_path):
    final = tmp_path / "run" / "h_1.2.pt.trace.json.gz"
    final.parent.mkdir()
    merge.write_gzip_json_atomically({"traceEvents": []}, final, tmp_path / "run" / ".scratch")
    assert final.exists()
    assert list((tmp_path / "run" / ".scratch").iterdir()) == []


def test_the_manifest_is_built_typed_and_written_as_it_is(session):
    readings = (
        ClockReading(BASE_NS + 100_000, 0, 0),  # before the window: left out
        ClockReading(BASE_NS + 1_000_000, 10_000_000, 1_000_000),
        ClockReading(BASE_NS + 2_000_000, 12_000_000, 1_500_000),
        ClockReading(BASE_NS + 3_000_000, 15_000_000, 1_500_000),
    )
    rank = replace(result(), window_clock=readings)
    inputs = merge.MergeInputs(
        session_dir=session,
        command=("dlprof", "record"),
        script=("python", "t.py"),
        exit_code=0,
        memory_samples=[],
        memory_interval_ms=100,
    )
    kineto, manifest = merge.merge_rank(kineto_trace(), rank, inputs)
    assert schema.MANIFEST_KEY not in kineto  # the manifest goes in last, redacted or not
    cpu = manifest.main_process_cpu
    assert (cpu.steps, cpu.wall_ms_per_step, cpu.cpu_ms_per_step, cpu.runq_ms_per_step) == (2, 1.0, 2.5, 0.25)
    assert manifest.loader == rank.loaders[0] and manifest.schedule == rank.schedule
    assert [(w.pid, w.loader) for w in manifest.workers] == [(WORKER_PID, 0)]
    document = merge.trace_document(kineto, manifest)
    written = json.loads(merge.dumps_trace(document))[schema.MANIFEST_KEY]
    assert parse_manifest(written) == (manifest, ())
