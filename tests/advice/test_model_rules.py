"""The throughput model and the rules, with numbers worked out by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import DATA_DIR

from dlprof.advice.model import EpochModel, ModelInputs, candidate_counts, memory_limit, predict, restart_ms
from dlprof.advice.rules import CHOOSE_WITHIN, WITHIN_BEST, _choose, advise, trainer_arguments, verdict_of
from dlprof.analysis.unprofiled import unprofiled_stats
from dlprof.core.manifest import LoaderConfig
from dlprof.report import render
from dlprof.results.advice import Advice, Prediction
from dlprof.results.report import Report
from dlprof.trace.discover import load_run
from dlprof.workflows.analyze import analyze_run


def inputs(**overrides) -> ModelInputs:
    base = {
        "consumer_ms": 10.0,
        "batches_per_step": 1.0,
        "batch_ms": 30.0,
        "batch_cpu_ms": 30.0,
        "handoff_ms": 0.0,
        "usable_cores": 4,
        "main_cpu_ms": 10.0,
        "worker_pss_mib": None,
        "available_ram_mib": None,
    }
    return ModelInputs(**{**base, **overrides})


def test_three_bounds():
    model = inputs()
    # n=0: 10 + 30; n=1: loader 30; n=2: loader 15; n=3: all three bounds meet at 10; n=4: consumer 10.
    assert [predict(model, n).step_ms for n in range(5)] == pytest.approx([40, 30, 15, 10, 10])
    assert [predict(model, n).bound for n in range(5)] == ["main process", "loader", "loader", "consumer", "consumer"]
    assert predict(model, 3).steps_per_s == pytest.approx(100.0)


def test_cpu_bound_and_handoff():
    model = inputs(usable_cores=2, main_cpu_ms=20.0, handoff_ms=1.0)
    # cores: (20 + 30) / 2 = 25 ms per step whatever the worker count; the hand-off is not added on top.
    assert predict(model, 2).step_ms == pytest.approx(25.0) and predict(model, 2).bound == "cpu"
    assert predict(model, 8).step_ms == pytest.approx(25.0)
    # The hand-off is the main process's own work: it lengthens the consumer (10 + 1 = 11 > 30/4, 40/4).
    assert (
        predict(inputs(handoff_ms=1.0), 4).step_ms == pytest.approx(11.0)
        and predict(inputs(handoff_ms=1.0), 4).bound == "consumer"
    )
    # Workers' CPU to send their batches (shared memory) is no span's: the CPU bound adds it (20 + 30 + 10) / 2.
    assert predict(inputs(usable_cores=2, main_cpu_ms=20.0, worker_send_ms=10.0), 4).step_ms == pytest.approx(30.0)
    # Recorded at num_workers=0, the measured main-process CPU has no hand-off in it: the CPU bound adds it.
    assert predict(
        inputs(usable_cores=2, main_cpu_ms=20.0, handoff_ms=2.0, cpu_includes_handoff=False), 4
    ).step_ms == pytest.approx(26.0)


def test_the_recorded_count_is_anchored_to_its_measured_unprofiled_step():
    # raw n=2: max(10, 30/2, 40/4) = 15 ms, measured 12 ms: the workers' regime is scaled by 12/15.
    model = inputs(recorded_workers=2, measured_step_ms=12.0)
    assert predict(model, 2).step_ms == pytest.approx(12.0)
    assert predict(model, 3).step_ms == pytest.approx(10.0 * 0.8)
    assert predict(model, 0).step_ms == pytest.approx(40.0)  # the other regime is not scaled
    # Recorded at 0: only n=0 is anchored (measured 36 ms instead of 10 + 30).
    model = inputs(recorded_workers=0, measured_step_ms=36.0)
    assert predict(model, 0).step_ms == pytest.approx(36.0) and predict(model, 2).step_ms == pytest.approx(15.0)


def test_epoch_restarts_measured_and_estimated():
    measured = EpochModel(
        steps_per_epoch=10,
        persistent_workers=False,
        restart_measured_ms=100.0,
        startup_fixed_ms=5.0,
        startup_per_worker_ms=20.0,
    )
    model = inputs(recorded_workers=2, epoch=measured)
    # Measured at 2 workers: 100 ms; each further worker adds the calibrated 20 ms; no workers, no restart.
    assert [restart_ms(model, n) for n in (0, 2, 4)] == pytest.approx([0.0, 100.0, 140.0])
    # n=2: 10 steps of 15 ms plus 100 ms per epoch -> 10 / 0.25 s = 40 steps/s.
    assert predict(model, 2).epoch_steps_per_s == pytest.approx(40.0) and predict(
        model, 2
    ).steps_per_s == pytest.approx(1000 / 15)
    # Recorded at 0: estimated from the calibration and the first batch: 5 + 20 n + 30.
    estimated = dataclasses.replace(measured, restart_measured_ms=None)
    assert restart_ms(inputs(recorded_workers=0, epoch=estimated), 1) == pytest.approx(55.0)
    persistent = dataclasses.replace(measured, persistent_workers=True)
    assert predict(inputs(recorded_workers=2, epoch=persistent), 2).epoch_steps_per_s == pytest.approx(1000 / 15)


def test_candidates_reach_where_io_bound_loading_stops_helping():
    assert candidate_counts(inputs()) == list(range(9))  # max(8, 2 * 4 cores)
    assert candidate_counts(inputs(batch_ms=200.0, batch_cpu_ms=1.0))[-1] == 21  # ceil(200 / 10) + 1


def test_memory_limit():
    assert memory_limit(inputs(worker_pss_mib=1000.0, available_ram_mib=4000.0), 0.5) == 2
    assert memory_limit(inputs(), 0.5) is None


def test_the_fewest_workers_predicted_within_two_percent_of_the_best_are_recommended():
    # io-loading recorded at num_workers=0 (scripts/bench_advice.py): 3 workers bound by the loader at 88.46 steps/s,
    # 4-8 by the main process at 92.80. 3 is within 5 % of the best but not 2 %: in truth it ran at 92.3 % of 4.
    rates = [23.1, 29.5, 59.0, 88.46] + [92.80] * 5
    predicted = [
        Prediction(num_workers=n, step_ms=1000 / r, steps_per_s=r, bound="loader" if n < 4 else "consumer")
        for n, r in enumerate(rates)
    ]
    assert 1 - WITHIN_BEST < 88.46 / 92.80 < 1 - CHOOSE_WITHIN
    assert _choose(inputs(), predicted, False) == (4, "consumer")
    # Within 2 % (98.1 %), the fewer workers.
    close = [
        *predicted[:3],
        Prediction(num_workers=3, step_ms=1000 / 91.0, steps_per_s=91.0, bound="loader"),
        *predicted[4:],
    ]
    assert _choose(inputs(), close, False) == (3, "loader")


def test_verdict_thresholds():
    assert [verdict_of(p) for p in (25.0, 20.0, 5.0, 4.9)] == ["HIGHLY", "MODERATELY", "MODERATELY", "NOT"]


def test_recommendation_on_the_hand_written_dlprof_run():
    report = analyze_run(load_run(DATA_DIR / "tiny_dlprof_trace.json"))
    advice = report.advice
    # Steady unprofiled reference steps (the first 2 after the export left out): step 0.595 ms, consumer 0.595 - 0.1
    # = 0.495 ms, main CPU 0.8 ms; batch 0.7 - 0.05 = 0.65 ms (CPU 0.6); hand-off 0.1 ms/step (measured: the
    # batches have no tensors to calibrate with); 4 cores.
    # n=0: 0.495 + 0.65 = 1.145; n=1 raw max(0.495 + 0.1, 0.65, (0.8 + 0.6) / 4) = 0.65, anchored to the measured
    # 0.595; n=2 raw 0.595 -> 0.595 * 0.595 / 0.65.
    assert [p.step_ms for p in advice.predicted[:3]] == pytest.approx([1.145, 0.595, 0.595 * 0.595 / 0.65])
    # Over whole 16-step epochs a restart (estimated 30 + 20 n ms + the 0.65 ms first batch) dominates such tiny steps:
    # n=1: 16 / (16 * 0.595 + 50.65) ms.
    assert advice.predicted[1].epoch_steps_per_s == pytest.approx(16000 / (16 * 0.595 + 50.65))
    assert (advice.num_workers, advice.bound, advice.verdict) == (0, "worker restarts", "HIGHLY")
    assert (advice.pin_memory, advice.prefetch_factor, advice.persistent_workers) == (None, None, None)
    assert any("0.65 ms to produce" in e for e in advice.evidence)
    assert any("profiling made steps 68 % slower: 1.00 ms profiled vs 0.59 ms unprofiled" in e for e in advice.evidence)
    assert any("with persistent_workers=True, num_workers=2" in e for e in advice.evidence)


def test_recorded_too_many_workers_is_called_out():
    run = load_run(DATA_DIR / "tiny_dlprof_trace.json")
    report = analyze_run(run)
    manifest = dataclasses.replace(run.manifest, loader=dataclasses.replace(run.manifest.loader, num_workers=4))
    advice, _ = advise(report.steps, report.loader, None, manifest, 1.0, False, report.unprofiled)
    assert advice.num_workers == 0
    assert any("num_workers=4 (as recorded)" in e and "4 extra worker(s) buy nothing" in e for e in advice.evidence)


def test_persistent_workers_advised_with_the_measured_restart():
    run = load_run(DATA_DIR / "tiny_dlprof_trace.json")
    report = analyze_run(run)
    # Long epochs (1000 steps) make restarts cheap per step: one worker is worth it, and keeping it saves the rest.
    manifest = dataclasses.replace(run.manifest, loader=dataclasses.replace(run.manifest.loader, length=1000))
    unprofiled = unprofiled_stats(manifest, 1.0)
    advice, _ = advise(report.steps, report.loader, None, manifest, 1.0, False, unprofiled)
    assert advice.num_workers >= 1 and advice.persistent_workers is True
    assert any(
        "workers restart at every epoch (1000 steps)" in e and "persistent_workers=True keeps them" in e
        for e in advice.evidence
    )


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


def _advice(**settings) -> Advice:
    base = {"verdict": "HIGHLY", "num_workers": None, "pin_memory": None, "prefetch_factor": None}
    return Advice(**{**base, "persistent_workers": None, **settings, "bound": None, "predicted": [], "evidence": []})


def test_trainer_arguments_are_the_recommendation_itself():
    hf = LoaderConfig(id=0, num_workers=0, pin_memory=True, persistent_workers=False, created_by="transformers")
    assert trainer_arguments(_advice(num_workers=2, pin_memory=False, persistent_workers=True), hf) == (
        "--dataloader_num_workers 2 --dataloader_pin_memory false --dataloader_persistent_workers true"
    )
    assert trainer_arguments(_advice(num_workers=4, pin_memory=True, prefetch_factor=4), hf) == (
        "--dataloader_num_workers 4 --dataloader_pin_memory true --dataloader_prefetch_factor 4"
    )
    # Nothing but the advice's own settings: a setting it keeps is not in the line, whatever the run had.
    persistent = LoaderConfig(id=0, num_workers=2, persistent_workers=True, created_by="ms-swift")
    assert trainer_arguments(_advice(num_workers=0), persistent) == "--dataloader_num_workers 0"
    assert trainer_arguments(_advice(), hf) is None  # nothing advised
    assert trainer_arguments(_advice(num_workers=2), LoaderConfig(id=0, num_workers=0)) is None  # the script's own
    assert trainer_arguments(_advice(num_workers=2), None) is None


def test_no_workers_for_a_persistent_loader_says_persistent_workers_false_in_table_json_and_arguments():
    """Seen on real ``swift sft`` runs: the table said persistent_workers=keep, the Trainer-arguments line false."""
    run = load_run(DATA_DIR / "tiny_dlprof_trace.json")
    report = analyze_run(run)
    loader = dataclasses.replace(run.manifest.loader, persistent_workers=True, created_by="ms-swift")
    manifest = dataclasses.replace(run.manifest, loader=loader)
    advice, _ = advise(report.steps, report.loader, None, manifest, 1.0, False, report.unprofiled)
    assert (advice.num_workers, advice.persistent_workers) == (0, False)
    assert any("PyTorch refuses without workers" in e and "persistent_workers=False" in e for e in advice.evidence)
    assert advice.trainer_arguments == "--dataloader_num_workers 0 --dataloader_persistent_workers false"
    rendered = Report([dataclasses.replace(report, advice=advice)])
    text = render(rendered, "text")
    assert "num_workers=0  pin_memory=keep  prefetch_factor=keep  persistent_workers=False" in text
    assert "Trainer arguments: --dataloader_num_workers 0 --dataloader_persistent_workers false" in text
    recommendation = json.loads(render(rendered, "json"))["recommendation"]
    assert (recommendation["num_workers"], recommendation["persistent_workers"]) == (0, False)
    assert recommendation["trainer_arguments"] == advice.trainer_arguments
    # Without workers recommended, a loader without persistent workers keeps its setting.
    kept, _ = advise(report.steps, report.loader, None, run.manifest, 1.0, False, report.unprofiled)
    assert (kept.num_workers, kept.persistent_workers) == (0, None)
