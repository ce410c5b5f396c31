"""Step, GPU and loader analysis on the hand-written traces in tests/data (expected µs worked out below)."""

from __future__ import annotations

import pytest
from conftest import DATA_DIR

from dlprof.analysis.gpu import gpu_stats
from dlprof.analysis.intervals import intersect, subtract, union
from dlprof.analysis.loader import loader_stats
from dlprof.analysis.steps import step_breakdown
from dlprof.core.errors import NoStepsError
from dlprof.results.analysis import CATEGORIES
from dlprof.trace.discover import load_run


@pytest.fixture(scope="module")
def cuda_run():
    return load_run(DATA_DIR / "tiny_cuda_trace.json")


@pytest.fixture(scope="module")
def dlprof_run():
    return load_run(DATA_DIR / "tiny_dlprof_trace.json")


def test_interval_arithmetic():
    assert union([(5, 7), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 7)]
    assert subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert intersect([(0, 4), (6, 10)], [(3, 7)]) == [(3, 4), (6, 7)]


def test_step_breakdown_by_priority(cuda_run):
    # Step 1 (0-1000 µs): __next__ 0-200, aten::to 200-250 (queues the HtoD copy), linear 250-500,
    # backward 520-820, optimizer 850-950; the gaps 500-520, 820-850 and 950-1000 are "other".
    first, second = step_breakdown(cuda_run).steps
    assert [first.category_ms(c) for c in CATEGORIES] == pytest.approx([0.2, 0.05, 0.25, 0.3, 0.1, 0.1])
    # Step 2 (1000-1500 µs): only a 400 µs wait.
    assert [second.category_ms(c) for c in CATEGORIES] == pytest.approx([0.4, 0, 0, 0, 0, 0.1])
    for step in (first, second):
        assert sum(step.category_ms(c) for c in CATEGORIES) == pytest.approx(step.step_ms)


def test_step_summary_and_input_bound_share(cuda_run):
    breakdown = step_breakdown(cuda_run)
    assert breakdown.step.mean_ms == pytest.approx(0.75)
    assert breakdown.step.p90_ms == pytest.approx(0.95)  # 0.5 + 0.9 * (1.0 - 0.5)
    assert breakdown.categories["data_wait"].mean_ms == pytest.approx(0.3)
    assert breakdown.data_wait_pct == pytest.approx(40.0)
    assert breakdown.consumer_ms == pytest.approx(0.45)


def test_gpu_idle_split(cuda_run):
    stats = gpu_stats(cuda_run)
    step = stats.steps[0]
    # busy: memcpy 230-270, kernels 300-450 and 600-700 = 290 µs of 1000.
    assert step.busy_ms == pytest.approx(0.29) and step.idle_ms == pytest.approx(0.71)
    # gap 0-230: 200 waiting for data, then 200-210 until cudaMemcpyAsync, 20 other;
    # gap 270-300: 20 until the launch at 290, 10 other; gap 450-600: 130 until the launch at 580,
    # 20 other; gap 700-1000: nothing follows, 300 other.
    assert step.idle_data_ms == pytest.approx(0.2)
    assert step.idle_launch_ms == pytest.approx(0.16)
    assert step.idle_other_ms == pytest.approx(0.35)
    assert step.h2d_ms == pytest.approx(0.04)
    assert (stats.h2d_copies, stats.h2d_pageable_copies, stats.h2d_pinned_copies) == (1, 1, 0)
    assert stats.h2d_mib_per_step == pytest.approx(0.5)  # 1 MiB over 2 steps


def test_cpu_trace_has_no_gpu_stats(dlprof_run):
    assert gpu_stats(dlprof_run) is None


def test_loader_costs_per_batch(dlprof_run):
    stats = loader_stats(dlprof_run)
    assert len(stats.batches) == 2 and stats.workers_observed == 1
    # Per batch: 700 µs wall (600 CPU, 50 waiting for a core); fetch 600 µs of which the tokenizer
    # took 300 (CPU 520 of which 280); collate 100 (CPU 80).
    assert stats.batch.mean_ms == pytest.approx(0.7)
    assert stats.batch_cpu_ms_mean == pytest.approx(0.6)
    assert stats.batch_runq_ms_mean == pytest.approx(0.05)
    assert (stats.fetch.mean_ms, stats.fetch_cpu_ms_mean) == pytest.approx((0.3, 0.24))
    assert (stats.tokenize.mean_ms, stats.tokenize_cpu_ms_mean) == pytest.approx((0.3, 0.28))
    assert (stats.collate.mean_ms, stats.collate_cpu_ms_mean) == pytest.approx((0.1, 0.08))
    assert stats.cpu_fraction == pytest.approx(1.2 / 1.3)
    assert stats.bound == "cpu"
    # batch 5 was ready at 200 µs, its __next__ ran 0-300: 200 not ready, 100 ready; batch 6 was
    # ready at 1000 and its __next__ ran 1000-1100: 100 ready. Over 2 steps:
    assert stats.wait.not_ready_ms_mean == pytest.approx(0.1)
    assert stats.wait.ready_ms_mean == pytest.approx(0.1)
    (worker,) = stats.workers
    assert (worker.worker, worker.pid, worker.batches, worker.pss_mib_last, worker.pss_growth_mib_per_min) == (
        0,
        10,
        2,
        100.0,
        0.0,
    )
    assert worker.capacity_per_s == pytest.approx(1000 / 0.7)


def test_foreign_trace_without_spans_has_no_loader_stats(cuda_run):
    assert loader_stats(cuda_run) is None
    assert cuda_run.loads_in_main_process is True


def test_no_steps_says_how_to_add_them(tmp_path):
    trace = tmp_path / "nosteps.json"
    trace.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}'
    )
    with pytest.raises(NoStepsError, match=r"prof\.step\(\)"):
        step_breakdown(load_run(trace))


@pytest.mark.parametrize(
    ("name", "steps", "gpu"),
    [
        ("hta_trace_diff_control.json.gz", 6, True),
        ("hta_rocm_mi250_minitoy.json.gz", 2, True),
        ("hta_rank_non_gpu.json.gz", 1, False),
    ],
)
def test_real_traces_add_up(name, steps, gpu):
    run = load_run(DATA_DIR / name)
    breakdown = step_breakdown(run)
    assert len(breakdown.steps) == steps
    for step in breakdown.steps:
        assert sum(step.category_ms(c) for c in CATEGORIES) == pytest.approx(step.step_ms, rel=1e-9)
    stats = gpu_stats(run)
    assert (stats is not None) == gpu
    if stats:
        for s in stats.steps:
            assert s.busy_ms + s.idle_ms == pytest.approx(breakdown.steps[stats.steps.index(s)].step_ms, rel=1e-6)
            assert s.idle_data_ms + s.idle_launch_ms + s.idle_other_ms == pytest.approx(s.idle_ms, abs=1e-9)


def test_old_kineto_trace_h2d_copies_are_pinned_and_counted():
    stats = gpu_stats(load_run(DATA_DIR / "hta_trace_diff_control.json.gz"))
    assert stats.h2d_copies == 150 and stats.h2d_pinned_copies == 150
