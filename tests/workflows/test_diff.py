"""``dlprof.workflows.diff``: two hand-written runs, every expected number worked out here.

The traces follow ``tests/data/tiny_dlprof_trace.json`` (two ``ProfilerStep``s, one DataLoader
``__next__`` per step, worker spans, memory counters, dlprof's manifest) but are written by
:func:`write_run` so each test states exactly what differs. Steps are laid out from ts 0: the
``__next__`` wait, a 300 µs forward, a 200 µs backward, an 80 µs optimizer step at the step's end.

Run A ("before"): num_workers=1, prefetch_factor=2, steps of 1000 µs (wait 300) and 800 µs (wait 100);
one worker (PSS 100 MiB) producing both batches: fetch span 600 µs with a 300 µs tokenizer call inside,
collate 100 µs, batch 700 µs.
    step 0.9 ms, data wait 0.2 ms (22.22 %), fetch 0.3, tokenizer 0.3, collate 0.1, batch 0.7 ms.
Run B ("after"): num_workers=2, prefetch_factor=4, steps of 700 µs (wait 50) and 600 µs (wait 30);
worker 0 (PSS 90) fetch 400 with tokenizer 200, collate 100; worker 1 (PSS 95) fetch 600 with
tokenizer 300, collate 100.
    step 0.65 ms, data wait 0.04 ms (6.15 %), fetch (0.2 + 0.3) / 2 = 0.25, tokenizer 0.25, collate 0.1,
    batch (0.5 + 0.7) / 2 = 0.6 ms, worker memory 185 MiB.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA_DIR

from dlprof.core.errors import DlprofError, UsageError
from dlprof.results.diff import SCHEMA
from dlprof.workflows.analyze import build_report
from dlprof.workflows.diff import diff
from dlprof.workflows.output import check_output

RANKS = DATA_DIR / "ranks"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
FIRST_STEP = 5

#: (step duration µs, data wait µs) per recorded step.
STEPS_A = [(1000, 300), (800, 100)]
STEPS_B = [(700, 50), (600, 30)]
#: (worker id, pid, PSS MiB, [(batch, fetch µs incl. tokenizer, tokenizer µs, collate µs)]).
WORKERS_A = [(0, 10, 100.0, [(5, 600, 300, 100), (6, 600, 300, 100)])]
WORKERS_B = [(0, 10, 90.0, [(5, 400, 200, 100)]), (1, 11, 95.0, [(6, 600, 300, 100)])]
#: Step clocks for version-2 manifests: start-up, two profiled steps, 14 unprofiled reference steps, of which the
#: first prefetch queue's worth are left out (A: 1 worker x 2 batches; B: 2 workers x 4) and none waits.
PHASES = ["before", "profiled", "profiled"] + ["after"] * 14
WALL_A = [5.0, 1.0, 0.8] + [0.52, 0.48] * 7  # profiled median 0.9, unprofiled 0.5 (12 steady steps)
WALL_B = [5.0, 0.7, 0.6] + [0.41, 0.39] * 7  # profiled median 0.65, unprofiled 0.4 (6 steady steps)

ROW_KEYS = [
    "step_ms",
    "unprofiled_step_ms",
    "unprofiled_steps_per_s",
    "data_wait_ms",
    "data_wait_pct",
    "fetch_ms",
    "tokenize_ms",
    "collate_ms",
    "batch_ms",
    "worker_pss_mib",
    "profiler_overhead_pct",
]


def _span(name: str, pid: int, ts: float, dur: float, worker: int, batch: int, **args) -> dict:
    return {
        "ph": "X",
        "cat": "dlprof",
        "name": name,
        "pid": pid,
        "tid": pid,
        "ts": ts,
        "dur": dur,
        "args": {
            "cpu_us": dur * 0.9,
            "dlprof_loader": 0,
            "dlprof_epoch": 0,
            "dlprof_batch": batch,
            "dlprof_worker": worker,
            **args,
        },
    }


def trace_document(
    steps: list[tuple[int, int]],
    workers: list,
    *,
    num_workers: int,
    prefetch_factor: int | None = 2,
    manifest_version: int = 1,
    wall_ms: list[float] | None = None,
    overrides: dict | None = None,
    kernel_us: int | None = None,
) -> dict:
    """A two-step trace like tests/data/tiny_dlprof_trace.json, with the given steps, workers and settings."""
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    starts, t = [], 0
    for i, (dur, wait) in enumerate(steps):
        starts.append(t)
        number = FIRST_STEP + i
        events += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{number}",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": dur,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": SINGLE if num_workers == 0 else MULTI,
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": wait,
                "args": {"dlprof_loader": 0, "dlprof_epoch": 0, "dlprof_batch": number},
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t + wait, "dur": 300},
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "autograd::engine::evaluate_function: AddmmBackward0",
                "pid": 1,
                "tid": 1,
                "ts": t + wait + 300,
                "dur": 200,
            },
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "Optimizer.step#AdamW.step",
                "pid": 1,
                "tid": 1,
                "ts": t + dur - 80,
                "dur": 80,
            },
        ]
        if kernel_us:
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "gemm",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + wait + 50,
                    "dur": kernel_us,
                    "args": {"stream": 7},
                }
            )
        t += dur
    for worker, pid, pss, batches in workers:
        if worker >= 0:
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"DataLoader worker {worker}"},
                }
            )
        for batch, fetch, tokenizer, collate in batches:
            end = starts[batch - FIRST_STEP]  # ready when its step asks for it
            begin = end - fetch - collate
            events += [
                _span("batch", pid, begin, fetch + collate, worker, batch, runq_us=0),
                _span("dataset fetch", pid, begin, fetch, worker, batch),
                _span("tokenizer", pid, begin + 10, tokenizer, worker, batch),
                _span("collate_fn", pid, begin + fetch, collate, worker, batch),
            ]
        for ts in (0, t):
            events.append(
                {
                    "ph": "C",
                    "cat": "dlprof",
                    "name": "memory (MiB)",
                    "pid": pid,
                    "tid": pid,
                    "ts": ts,
                    "args": {"uss_mib": 20.0, "pss_mib": pss},
                }
            )
    manifest = {
        "manifest_version": manifest_version,
        "dlprof_version": "0.2.0",
        "status": "complete",
        "error": None,
        "exit_code": 0,
        "command": ["dlprof", "record"],
        "script": ["python", "train.py", "--num-workers", str(num_workers)],
        "rank": 0,
        "world_size": 1,
        "schedule": {"wait": 1, "warmup": 1, "active": len(steps), "step_mode": "optimizer"},
        "steps": {"run": 9, "recorded": len(steps)},
        "main_process_cpu": {"steps": len(steps), "cpu_ms_per_step": 0.8, "wall_ms_per_step": 0.7},
        "loader": {
            "id": 0,
            "iterations": 1,
            "batches": 9,
            "num_workers": num_workers,
            "batch_size": 4,
            "pin_memory": False,
            "prefetch_factor": prefetch_factor,
            "persistent_workers": False,
            "drop_last": False,
            "start_method": "fork",
        },
        "workers": [
            {"pid": pid, "worker_id": w, "loader": 0, "epoch": 0, "start_ns": 0} for w, pid, _, _ in workers if w >= 0
        ],
        "host": {
            "hostname": "test",
            "usable_cores": 4,
            "cpu_count": 4,
            "ram_total_mib": 32000,
            "ram_available_mib": 16000,
            "gpu": None,
            "torch_threads": 4,
        },
        "versions": {"dlprof": "0.2.0", "torch": "2.13.0+cpu"},
        "memory": {"interval_ms": 100, "processes": []},
    }
    if manifest_version >= 2:
        n = len(wall_ms)
        manifest["step_clock"] = {
            "phase": PHASES,
            "wall_ms": wall_ms,
            "cpu_ms": [0.5] * n,
            "runq_ms": [0.0] * n,
            "wait_ms": [0.05] * n,
            "batches": [1] * n,
            "epoch_start": [False] * n,
            "fork_probe": [False] * n,
        }
        manifest["overrides"] = overrides or {}
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "dlprof": manifest, "traceEvents": events}


def write_run(directory: Path, name: str, document: dict) -> Path:
    """A run directory ``directory/name`` holding one trace; returns the run directory."""
    run = directory / name
    run.mkdir(parents=True)
    (run / "host_1.1.pt.trace.json").write_text(json.dumps(document))
    return run


def before_after(tmp_path: Path, version: int = 1, **b_options) -> tuple[Path, Path]:
    """Runs A and B as the module docstring describes (manifest ``version`` for both)."""
    a = trace_document(STEPS_A, WORKERS_A, num_workers=1, manifest_version=version, wall_ms=WALL_A)
    b = trace_document(
        STEPS_B, WORKERS_B, num_workers=2, prefetch_factor=4, manifest_version=version, wall_ms=WALL_B, **b_options
    )
    return write_run(tmp_path, "before", a), write_run(tmp_path, "after", b)


def rows(result) -> dict:
    return {r.key: r for r in result.rows}


def test_profiled_runs_every_row_exact(tmp_path):
    a, b = before_after(tmp_path, version=1)
    result = diff(a, b)
    assert result.schema == SCHEMA == "dlprof.diff/1"
    assert (result.a.name, result.b.name) == ("before", "after")
    assert result.a.trace_file == str(a / "host_1.1.pt.trace.json")
    assert [r.key for r in result.rows] == ROW_KEYS  # no GPU in either run: no GPU row
    expected = {  # key: (a, b, delta, delta %)
        "step_ms": (0.9, 0.65, -0.25, -100 * 0.25 / 0.9),
        "unprofiled_step_ms": (None, None, None, None),
        "unprofiled_steps_per_s": (None, None, None, None),
        "data_wait_ms": (0.2, 0.04, -0.16, -80.0),
        "data_wait_pct": (
            100 * 0.2 / 0.9,
            100 * 0.04 / 0.65,
            100 * 0.04 / 0.65 - 100 * 0.2 / 0.9,
            100 * ((0.04 / 0.65) / (0.2 / 0.9) - 1),
        ),
        "fetch_ms": (0.3, 0.25, -0.05, -100 * 0.05 / 0.3),
        "tokenize_ms": (0.3, 0.25, -0.05, -100 * 0.05 / 0.3),
        "collate_ms": (0.1, 0.1, 0.0, 0.0),
        "batch_ms": (0.7, 0.6, -0.1, -100 * 0.1 / 0.7),
        "worker_pss_mib": (100.0, 185.0, 85.0, 85.0),
        "profiler_overhead_pct": (None, None, None, None),
    }
    for key, (va, vb, delta, delta_pct) in expected.items():
        row = rows(result)[key]
        got = (row.a, row.b, row.delta, row.delta_pct)
        assert got == pytest.approx((va, vb, delta, delta_pct), abs=1e-9), key
    assert result.settings_changed == {
        "num_workers": (1, 2),
        "prefetch_factor": (2, 4),
        "command": (["python", "train.py", "--num-workers", "1"], ["python", "train.py", "--num-workers", "2"]),
    }
    assert result.settings_unknown == ()
    assert result.speed_basis == "profiled step time"
    assert result.speed_change_pct == pytest.approx(100 * (0.9 / 0.65 - 1))  # 38.46 % more steps/s
    assert result.verdict == (
        "B is 38.5 % faster than A (profiled step time 0.90 → 0.65 ms; unprofiled speed unknown for A and B), "
        "data wait 0.20 → 0.04 ms per step"
    )


def test_unprofiled_speed_when_both_runs_have_reference_steps(tmp_path):
    a, b = before_after(tmp_path, version=2, overrides={"num_workers": 2})
    result = diff(a, b)
    r = rows(result)
    # A: 12 steady steps of 0.52 and 0.48 ms = 0.5 ms (2000 steps/s); profiled median 0.9 -> overhead 80 %.
    # B: 0.4 ms (2500 steps/s); profiled median 0.65 -> overhead 62.5 %.
    assert (r["unprofiled_step_ms"].a, r["unprofiled_step_ms"].b) == pytest.approx((0.5, 0.4))
    assert (r["unprofiled_step_ms"].delta, r["unprofiled_step_ms"].delta_pct) == pytest.approx((-0.1, -20.0))
    assert (r["unprofiled_steps_per_s"].a, r["unprofiled_steps_per_s"].b) == pytest.approx((2000.0, 2500.0))
    assert (r["unprofiled_steps_per_s"].delta, r["unprofiled_steps_per_s"].delta_pct) == pytest.approx((500.0, 25.0))
    assert (r["profiler_overhead_pct"].a, r["profiler_overhead_pct"].b) == pytest.approx((80.0, 62.5))
    assert (r["profiler_overhead_pct"].delta, r["profiler_overhead_pct"].delta_pct) == pytest.approx((-17.5, -21.875))
    assert r["step_ms"].a == pytest.approx(0.9)  # the profiled rows do not change with the manifest version
    assert result.speed_basis == "unprofiled steps/s"
    assert result.speed_change_pct == pytest.approx(25.0)
    assert (
        result.verdict
        == "B is 25.0 % faster than A (unprofiled steps/s 2000.0 → 2500.0), data wait 0.20 → 0.04 ms per step"
    )
    assert result.settings_changed["overrides"] == ({}, {"num_workers": 2})


def test_profiled_basis_says_which_run_lacks_reference_steps(tmp_path):
    a = write_run(
        tmp_path, "new", trace_document(STEPS_A, WORKERS_A, num_workers=1, manifest_version=2, wall_ms=WALL_A)
    )
    b = write_run(tmp_path, "old", trace_document(STEPS_B, WORKERS_B, num_workers=2, manifest_version=1))
    result = diff(a, b)
    assert result.speed_basis == "profiled step time"
    assert "unprofiled speed unknown for B)" in result.verdict
    assert rows(result)["unprofiled_steps_per_s"].a == pytest.approx(2000.0)
    assert rows(result)["unprofiled_steps_per_s"].b is None and rows(result)["unprofiled_steps_per_s"].delta is None
    assert result.settings_changed.keys() == {"num_workers", "command"}  # version 1 had no overrides: none, as in A


def test_settings_a_trace_cannot_tell_are_unknown_not_changed(tmp_path):
    a, _ = before_after(tmp_path)
    bare = trace_document(STEPS_A, WORKERS_A, num_workers=1)
    del bare["dlprof"]  # the same run as A, as a trace another tool wrote: no manifest
    b = write_run(tmp_path, "bare", bare)
    result = diff(a, b)
    assert result.settings_changed == {}
    assert result.settings_unknown == (
        "num_workers",
        "batch_size",
        "pin_memory",
        "prefetch_factor",
        "persistent_workers",
        "drop_last",
        "start_method",
        "command",
        "overrides",
        "usable_cores",
        "torch",
    )
    assert result.speed_change_pct == pytest.approx(0.0) and result.verdict.startswith("B is as fast as A")


def test_slower_and_same(tmp_path):
    a, b = before_after(tmp_path)
    slower = diff(b, a)
    assert slower.speed_change_pct == pytest.approx(100 * (0.65 / 0.9 - 1))
    assert slower.verdict.startswith("B is 27.8 % slower than A (profiled step time 0.65 → 0.90 ms")
    same = diff(a, a)
    assert same.verdict.startswith("B is as fast as A")
    assert same.settings_changed == {} and same.speed_change_pct == 0.0
    assert all(r.delta in (None, 0.0) for r in same.rows)


def test_gpu_row_when_either_run_has_a_gpu(tmp_path):
    a = write_run(tmp_path, "cpu", trace_document(STEPS_A, WORKERS_A, num_workers=1))
    # One 200 µs kernel per step of 700 and 600 µs: idle 500 and 400 µs, 0.45 ms per step.
    b = write_run(tmp_path, "cuda", trace_document(STEPS_B, WORKERS_B, num_workers=2, kernel_us=200))
    result = diff(a, b)
    gpu = rows(result)["gpu_idle_ms"]
    assert (gpu.a, gpu.b, gpu.delta, gpu.delta_pct) == (None, pytest.approx(0.45), None, None)
    assert [r.key for r in result.rows].index("gpu_idle_ms") == ROW_KEYS.index("batch_ms") + 1
    assert result.settings_changed["device"] == ("cpu", "cuda")


def test_loading_in_the_main_process_has_no_worker_memory(tmp_path):
    main = [(-1, 1, 500.0, [(5, 600, 300, 100), (6, 600, 300, 100)])]
    a = write_run(tmp_path, "w0", trace_document(STEPS_A, main, num_workers=0, prefetch_factor=None))
    b = write_run(tmp_path, "w2", trace_document(STEPS_B, WORKERS_B, num_workers=2))
    result = diff(a, b)
    memory = rows(result)["worker_pss_mib"]
    assert (memory.a, memory.b, memory.delta, memory.delta_pct) == (0.0, 185.0, 185.0, None)  # no % change from 0
    # PyTorch leaves prefetch_factor unset without workers: it does not apply there, so it is not "unknown".
    assert result.settings_unknown == ()
    assert result.settings_changed.keys() == {"num_workers", "command"}


def test_a_trace_file_is_one_run(tmp_path):
    a, b = before_after(tmp_path)
    result = diff(a / "host_1.1.pt.trace.json", b)
    assert result.a.name == "host_1.1.pt.trace.json" and result.b.name == "after"


def test_a_directory_of_several_runs_is_refused(tmp_path):
    before_after(tmp_path)
    with pytest.raises(UsageError) as raised:
        diff(tmp_path, tmp_path / "after")
    message = str(raised.value)
    assert "\n" not in message and str(tmp_path) in message and "2 runs" in message
    assert "give one run directory" in message


def test_no_trace_is_a_dlprof_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DlprofError):
        diff(tmp_path / "empty", tmp_path / "empty")


def test_check_output(tmp_path):
    a, b = before_after(tmp_path)
    trace = a / "host_1.1.pt.trace.json"
    check = lambda output, *inputs: check_output(output, inputs, what="diff", keep_run_dirs_clean=True)
    check(None, a, b)
    check(tmp_path / "diff.json", a, b)
    check(a / "diff.md", a, b)  # not read as a trace
    for bad in (trace, a / "diff.json"):
        with pytest.raises(UsageError):
            check(bad, a, b)
    with pytest.raises(UsageError, match="is the input trace"):
        check(trace, trace, b)


def test_a_run_of_several_ranks_is_compared_by_the_rank_analyze_reports(tmp_path):
    """tests/data/ranks: rank 1 waits 0.7 ms per step for data, rank 0 0.1 ms; rank 1 is the slowest."""
    a, b = (shutil.copytree(RANKS, tmp_path / side) for side in ("a", "b"))
    analyzed = build_report(a).runs[0]
    assert analyzed.ranks.slowest_rank == 1  # not the first file's rank
    result = diff(a, b)
    for side in (result.a, result.b):
        assert (side.rank, side.ranks) == (analyzed.ranks.slowest_rank, 2)
        assert side.trace_file.endswith("rank1.json") and Path(side.trace_file).name in analyzed.info.trace_file
    assert rows(result)["data_wait_ms"].a == pytest.approx(analyzed.steps.categories["data_wait"].mean_ms)
    assert rows(result)["data_wait_ms"].a == pytest.approx(0.7)
    one = diff(*before_after(tmp_path / "one"))
    assert (one.a.rank, one.a.ranks) == (None, 1)  # one rank: nothing to choose
