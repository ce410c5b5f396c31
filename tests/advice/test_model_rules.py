"""The throughput model and the rules, with numbers worked out by hand."""
from __future__ import annotations

import pytest

from conftest import DATA_DIR
from dlprof.advice.model import ModelInputs, candidate_counts, memory_limit, predict
from dlprof.advice.rules import advise, verdict_of
from dlprof.report.report import analyze_run
from dlprof.trace.run import load_run


def inputs(**overrides) -> ModelInputs:
    base = dict(consumer_ms=10.0, batches_per_step=1.0, batch_ms=30.0, batch_cpu_ms=30.0, handoff_ms=0.0, usable_cores=4,
                main_cpu_ms=10.0, worker_pss_mib=None, available_ram_mib=None)  # fmt: skip
    return ModelInputs(**{**base, **overrides})


def test_three_bounds():
    model = inputs()
    # n=0: 10 + 30; n=1: loader 30; n=2: loader 15; n=3: all three bounds meet at 10; n=4: consumer 10.
    assert [predict(model, n).step_ms for n in range(5)] == pytest.approx([40, 30, 15, 10, 10])
    assert [predict(model, n).bound for n in range(5)] == ["main process", "loader", "loader", "consumer", "consumer"]
    assert predict(model, 3).steps_per_s == pytest.approx(100.0)


def test_cpu_bound_and_handoff():
    model = inputs(usable_cores=2, main_cpu_ms=20.0, handoff_ms=1.0)
    # cores: (20 + 30) / 2 = 25 ms per step, plus the 1 ms hand-off, whatever the worker count.
    assert predict(model, 2).step_ms == pytest.approx(26.0) and predict(model, 2).bound == "cpu"
    assert predict(model, 8).step_ms == pytest.approx(26.0)


def test_candidates_reach_where_io_bound_loading_stops_helping():
    assert candidate_counts(inputs()) == list(range(9))  # max(8, 2 * 4 cores)
    assert candidate_counts(inputs(batch_ms=200.0, batch_cpu_ms=1.0))[-1] == 21  # ceil(200 / 10) + 1


def test_memory_limit():
    assert memory_limit(inputs(worker_pss_mib=1000.0, available_ram_mib=4000.0), 0.5) == 2
    assert memory_limit(inputs(), 0.5) is None


def test_verdict_thresholds():
    assert [verdict_of(p) for p in (25.0, 20.0, 5.0, 4.9)] == ["HIGHLY", "MODERATELY", "MODERATELY", "NOT"]


def test_recommendation_on_the_hand_written_dlprof_run():
    report = analyze_run(load_run(DATA_DIR / "tiny_dlprof_trace.json"))
    advice = report.advice
    # consumer 0.9 - 0.2 = 0.7 ms; batch 0.7 - 0.05 = 0.65 ms (CPU 0.6); hand-off 0.1 ms/step;
    # 4 cores, the main process measured at 1.2 CPU-ms per step.
    # n=0: 0.7 + 0.65 = 1.35; n>=1: max(0.7, 0.65/n, (1.2 + 0.6)/4) + 0.1 = 0.8.
    assert [p.step_ms for p in advice.predicted[:3]] == pytest.approx([1.35, 0.8, 0.8])
    assert (advice.num_workers, advice.bound, advice.verdict) == (1, "consumer", "HIGHLY")
    assert (advice.pin_memory, advice.prefetch_factor, advice.persistent_workers) == (None, None, None)
    assert any("0.65 ms to produce" in e for e in advice.evidence)


def test_recorded_too_many_workers_is_called_out():
    report = analyze_run(load_run(DATA_DIR / "tiny_dlprof_trace.json"))
    steps, loader = report.steps, report.loader
    manifest = {**load_run(DATA_DIR / "tiny_dlprof_trace.json").manifest}
    manifest["loader"] = {**manifest["loader"], "num_workers": 4}
    advice = advise(steps, loader, None, manifest, 1.0, False)
    assert advice.num_workers == 1
    assert any("num_workers=4 (as recorded)" in e and "3 extra worker(s) buy nothing" in e for e in advice.evidence)


def test_foreign_trace_with_workers_cannot_predict():
    report = analyze_run(load_run(DATA_DIR / "hta_trace_diff_control.json.gz"))
    assert report.advice.num_workers is None and report.advice.predicted == []
    assert any("no worker spans" in b for b in report.advice.basis)
    assert report.advice.pin_memory is True  # its copies are already pinned: keep it


def test_pageable_copies_recommend_pin_memory():
    report = analyze_run(load_run(DATA_DIR / "tiny_cuda_trace.json"))
    assert report.advice.pin_memory is True
    assert any("1 of 1 host-to-device copies are from pageable memory" in e for e in report.advice.evidence)
    # num_workers=0 without spans: the 0.3 ms wait per step is the loading itself
    assert report.advice.predicted[0].step_ms == pytest.approx(0.75)
    assert any("assumed to be all CPU" in b for b in report.advice.basis)
