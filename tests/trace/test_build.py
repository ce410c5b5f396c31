"""The builder's validation at the boundary: malformed events skipped and counted, a broken manifest read as unknown,
old Kineto spellings read, broken traces reported in one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import DATA_DIR, assert_one_line_error, invoke, render_all, write_json

import dlprof
from dlprof.core import schema
from dlprof.core.errors import NoStepsError, TraceFormatError
from dlprof.results.report import Report
from dlprof.trace.build import build_run
from dlprof.trace.events import is_backward
from dlprof.workflows.analyze import analyze_run

TINY = DATA_DIR / "tiny_dlprof_trace.json"
CUDA = DATA_DIR / "tiny_cuda_trace.json"
OLD_TRACES = [DATA_DIR / "kineto_pt18_resnet50_step7.json.gz", DATA_DIR / "kineto_pt19_resnet50_workers4_step7.json.gz"]


def _doc(path: Path = TINY) -> dict:
    return json.loads(path.read_text())


def _event(document: dict, name: str, cat: str | None = None) -> dict:
    return next(e for e in document["traceEvents"] if e.get("name") == name and (cat is None or e.get("cat") == cat))


# --- event fields ----------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["ts", "dur", "pid", "tid", "args", "name"])
@pytest.mark.parametrize("value", ["x", None, [1], {"a": 1}, -5, float("nan"), float("inf")])
def test_a_malformed_host_op_is_skipped_and_counted(field, value):
    document = _doc()
    op = next(e for e in document["traceEvents"] if e.get("cat") == "cpu_op")
    op[field] = value
    run = build_run(document, TINY, "tiny")
    report = analyze_run(run)
    legit = (
        (field in ("pid", "tid", "name") and isinstance(value, (int, str)) and not (field == "name" and value == -5))
        or (field == "ts" and value == -5)
        or (field == "args" and isinstance(value, dict))
    )
    if legit:  # another thread or an earlier start: a valid event, kept
        assert run.trace_problems == () and not any("skipped" in b for b in report.advice.basis)
        assert field != "ts" or run.next_calls[0].start_us == -5  # the op is the first DataLoader call
        return
    assert any("1 of 22 trace events skipped as malformed" in b and f"'{field}'" in b for b in report.advice.basis), (
        report.advice.basis
    )


def test_negative_worker_cpu_time_is_skipped_not_a_negative_fraction():
    document = _doc()
    for e in document["traceEvents"]:
        if e.get("cat") == schema.CATEGORY and e.get("name") == "batch":
            e["args"][schema.ARG_CPU_US] = -1_000_000
    run = build_run(document, TINY, "tiny")
    assert all(s.cpu_us >= 0 for s in run.loader_spans) and not any(s.name == "batch" for s in run.loader_spans)
    assert (
        "2 of 22 trace events skipped as malformed (2 with 'args.cpu_us' negative, non-finite or too large)"
        in run.trace_problems[0]
    )


def test_negative_bytes_and_wrong_typed_stream_are_skipped():
    document = _doc(CUDA)
    memcpy = next(e for e in document["traceEvents"] if e.get("cat") == "gpu_memcpy")
    memcpy["args"]["bytes"] = -(2**40)
    kernel = next(e for e in document["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["stream"] = "seven"
    run = build_run(document, CUDA, "cuda")
    assert (
        all(g.bytes >= 0 for g in run.gpu)
        and len(run.gpu) == sum(e.get("cat") in ("kernel", "gpu_memcpy") for e in _doc(CUDA)["traceEvents"]) - 2
    )
    assert "'args.bytes'" in run.trace_problems[0] and "'args.stream'" in run.trace_problems[0]


def test_counter_without_ts_and_event_without_name_are_skipped():
    document = _doc()
    counter = next(e for e in document["traceEvents"] if e.get("ph") == "C")
    del counter["ts"]
    op = next(e for e in document["traceEvents"] if e.get("cat") == "cpu_op")
    del op["name"]
    run = build_run(document, TINY, "tiny")
    assert len(run.memory) == 1 and "2 of 22" in run.trace_problems[0]


def test_nothing_usable_is_one_error():
    document = {"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": "soon", "dur": 5}, {"ph": "X", "ts": None}]}
    with pytest.raises(TraceFormatError, match="none of its 2 events is usable"):
        build_run(document, TINY, "bad")


def test_all_steps_of_zero_duration_is_one_error(tmp_path):
    document = _doc()
    for e in document["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["dur"] = 0
    path = write_json(tmp_path / "zero.json", document)
    with pytest.raises(NoStepsError, match="none of its 2 ProfilerStep events is usable"):
        dlprof.analyze(path)
    assert_one_line_error(invoke("analyze", path), "zero.json", "ProfilerStep")


def test_duplicated_profiler_steps_count_once():
    document = _doc()
    steps = [e for e in document["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    document["traceEvents"] += copy.deepcopy(steps) * 2
    run = build_run(document, TINY, "tiny")
    assert len(run.steps) == len(steps) == 2
    assert any("4 duplicated events" in p for p in run.trace_problems)


def _nested(depth: int) -> list:
    """A list nested ``depth`` levels deep, built without recursion."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_values_nested_deeper_than_python_recurses_are_never_walked():
    """In memory (``build_run`` of dicts: no parser bounds them), an event's name, category, process name and
    arguments nested 100,000 levels deep skip their events or are read as any other value, never a RecursionError."""
    document = _doc()
    deep = _nested(100_000)
    _event(document, "aten::linear", "cpu_op")["name"] = deep
    _event(document, "Optimizer.step#AdamW.step")["cat"] = deep
    _event(document, "process_name")["args"]["name"] = deep
    _event(document, "batch", "dlprof")["args"]["deep"] = deep
    document["distributedInfo"] = {"rank": deep}
    run = build_run(document, TINY, "tiny")
    assert run.trace_problems == (
        "2 of 22 trace events skipped as malformed (1 with 'args.name' of a process not a string, 1 with 'name' missing"
        " or not a string)",
    )
    assert run.rank is None and len(run.loader_spans) == len(build_run(_doc(), TINY, "tiny").loader_spans)
    render_all(Report([analyze_run(run)]))


def test_top_level_fields_of_the_wrong_type():
    document = _doc()
    document["distributedInfo"] = {"rank": [1]}
    document["baseTimeNanoseconds"] = "yesterday"
    run = build_run(document, TINY, "tiny")
    assert run.rank is None and run.base_us == 0.0


# --- the manifest ----------------------------------------------------------------------------------

MANIFEST_BREAKS = [
    ("loader", "x"),
    ("loader", [1]),
    ("host", None),
    ("host", 7),
    ("loader.num_workers", "two"),
    ("loader.num_workers", -3),
    ("host.usable_cores", -1),
    ("host.usable_cores", 2**70),
    ("host.usable_cores", 1.5),
    ("host.handoff", "fast"),
    ("host.handoff.per_batch_ms", -1.0),
    ("host.handoff.per_tensor_ms", 1e300),
    ("memory", [1]),
    ("memory.processes", {"a": 1}),
    ("host.gpu", "A100"),
    ("versions", ["torch"]),
    ("versions", {"torch": 2}),
    ("host.ram_available_mib", -5),
    ("step_clock.wall_ms", ["a"]),
    ("loader.batch_size", 0),
    ("loader.prefetch_factor", -2),
]


@pytest.mark.parametrize(("where", "value"), MANIFEST_BREAKS, ids=[f"{w}={v!r}" for w, v in MANIFEST_BREAKS])
def test_a_manifest_field_of_the_wrong_type_cannot_crash_the_report(tmp_path, where, value):
    document = _doc()
    node = document[schema.MANIFEST_KEY]
    *parents, last = where.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    report = dlprof.analyze(write_json(tmp_path / "m.json", document))
    render_all(report)
    info = report.runs[0].info
    assert info.num_workers is None or info.num_workers >= 0
    assert info.usable_cores is None or 0 <= info.usable_cores <= 2**63


# --- old Kineto spellings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "CudnnConvolutionBackward",
        "ReluBackward1",
        "AddmmBackward",
        "AddBackward0",
        "torch::autograd::AccumulateGrad",
        "autograd::engine::evaluate_function: ConvolutionBackward0",
    ],
)
def test_backward_ops_of_every_era(name):
    assert is_backward(name)


@pytest.mark.parametrize(
    "name", ["aten::convolution_backward", "Backward", "aten::relu", "ProfilerStep#3", "Optimizer.step#SGD.step"]
)
def test_not_backward(name):
    assert not is_backward(name)


@pytest.mark.parametrize("path", OLD_TRACES, ids=["pt1.8", "pt1.9"])
def test_old_kineto_traces_are_read(path):
    """PyTorch 1.8/1.9 traces (the TensorBoard plugin's resnet50 samples): Operator/Kernel/Memcpy/Runtime, string tids,
    no base time."""
    report = dlprof.analyze(path)
    run = report.runs[0]
    breakdown = {c: s.mean_ms for c, s in run.steps.categories.items()}
    assert run.info.device == "cuda" and len(run.steps.steps) == 1
    assert breakdown["backward"] > 10 and breakdown["forward"] > 10 and breakdown["optimizer"] > 10
    assert abs(sum(breakdown.values()) - run.steps.step.mean_ms) < 1e-6
    assert run.gpu.busy.mean_ms > 0 and run.gpu.h2d_copies == 2 and run.gpu.h2d_pageable_copies == 2
    assert run.gpu.h2d_mib_per_step == pytest.approx((19267584 + 256) / 2**20)  # images and labels
    assert not any("skipped as malformed" in b for b in run.advice.basis)
    render_all(report)


def test_old_single_process_trace_waits_for_data():
    run = dlprof.analyze(OLD_TRACES[0]).runs[0]  # num_workers=0: the main process loads every batch itself
    assert run.info.num_workers == 0 and run.steps.categories["data_wait"].mean_ms > 20


# --- broken traces through the CLI ------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        {"traceEvents": [{"ph": "X", "name": 5, "ts": "x"}]},
        {"traceEvents": [1, 2, 3]},
        {"traceEvents": [{"ph": "C", "name": "memory (MiB)"}]},
        {
            "traceEvents": [
                {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 0, "dur": 0, "pid": 1, "tid": 1}
            ]
        },
    ],
    ids=["wrong-types", "not-objects", "counter-without-ts", "zero-step"],
)
def test_cli_broken_traces_are_one_line(tmp_path, document):
    path = write_json(tmp_path / "bad.json", document)
    assert_one_line_error(invoke("analyze", path), "bad.json")
