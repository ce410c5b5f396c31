"""Unprofiled speed, profiler overhead and epoch restarts from the step clock, with exact numbers."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import DATA_DIR

from dlprof.analysis.unprofiled import unprofiled_stats
from dlprof.manifest import Epoch, StepClock
from dlprof.trace.discover import load_run


def _manifest():
    return load_run(DATA_DIR / "tiny_dlprof_trace.json").manifest


def test_reference_steps_against_profiled_ones():
    stats = unprofiled_stats(_manifest(), 1.0)
    # after: 0.62 0.6 0.58 0.6 0.61 0.59 -> median 0.6; profiled: 1.1 1.0 0.8 -> 1.0; the epoch start at step 0
    # and its 4 settling steps are start-up, not counted.
    assert (stats.reference_steps, stats.step_ms, stats.profiled_steps, stats.profiled_step_ms) == (6, 0.6, 3, 1.0)
    assert stats.overhead_pct == pytest.approx(100 * (1.0 / 0.6 - 1))
    assert (stats.consumer_ms, stats.wait_ms, stats.cpu_ms) == pytest.approx((0.5, 0.1, 0.8))
    assert stats.steps_per_s == pytest.approx(1000 / 0.6)
    epoch = stats.epoch
    assert (epoch.steps_per_epoch, epoch.restart_ms, epoch.first_batch_ms, epoch.num_workers) == (16.0, None, 2.0, 1)
    assert stats.epoch_steps_per_s is None  # workers restart, but no boundary was timed after start-up


def test_an_epoch_boundary_after_the_window_is_measured():
    manifest = _manifest()
    # 11 more unprofiled steps: a boundary at the 3rd, 100 ms then 10 ms over the 0.6 ms median, then 3 steady ones.
    extra = [0.6, 0.6, 100.6, 10.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    clock = manifest.step_clock
    clock = StepClock(
        phase=clock.phase + ("after",) * len(extra),
        wall_ms=clock.wall_ms + tuple(extra),
        cpu_ms=clock.cpu_ms + (0.8,) * len(extra),
        runq_ms=clock.runq_ms + (0.0,) * len(extra),
        wait_ms=clock.wait_ms + (0.1,) * len(extra),
        batches=clock.batches + (1,) * len(extra),
        epoch_start=clock.epoch_start + (False, False, True) + (False,) * 8,
    )
    loader = dataclasses.replace(
        manifest.loader, epochs=manifest.loader.epochs + (Epoch(start_ns=1, first_batch_ms=3.0, batches=5, end_ms=1.5),)
    )
    stats = unprofiled_stats(dataclasses.replace(manifest, step_clock=clock, loader=loader), 1.0)
    assert stats.reference_steps == 6 + 11 - 5 and stats.step_ms == pytest.approx(0.6)
    assert stats.epoch.boundaries_measured == 1 and stats.epoch.restart_ms == pytest.approx(110.0)
    assert (stats.epoch.first_batch_ms, stats.epoch.end_ms) == (2.5, 1.5)
    # Over whole 16-step epochs: 16 steps of 0.6 ms and one 110 ms restart.
    assert stats.epoch_steps_per_s == pytest.approx(16000 / (16 * 0.6 + 110))


def test_too_few_reference_steps_give_nothing():
    manifest = _manifest()
    clock = manifest.step_clock
    short = StepClock(*(column[:10] for column in dataclasses.astuple(clock)))
    assert unprofiled_stats(dataclasses.replace(manifest, step_clock=short), 1.0) is None
    assert unprofiled_stats(None, 1.0) is None


def test_whole_epochs_after_the_window_are_the_speed():
    manifest = _manifest()
    clock = manifest.step_clock
    # After the window: 2 steps, then two whole 8-step epochs (starts at +2, +10, +18), each 40 ms over 5
    # settling steps (15 + 4 * 6.25 ms over a 5 ms step) and 5 ms otherwise; then one step of the next epoch.
    epoch = [20.0, 11.25, 11.25, 11.25, 11.25, 5.0, 5.0, 5.0]
    extra = [5.0, 5.0, *epoch, *epoch, 20.0]
    starts = [False, False, True] + [False] * 7 + [True] + [False] * 7 + [True]
    n = len(extra)
    clock = StepClock(
        phase=clock.phase + ("after",) * n,
        wall_ms=clock.wall_ms + tuple(extra),
        cpu_ms=clock.cpu_ms + (1.0,) * n,
        runq_ms=clock.runq_ms + (0.0,) * n,
        wait_ms=clock.wait_ms + (0.5,) * n,
        batches=clock.batches + (1,) * n,
        epoch_start=clock.epoch_start + tuple(starts),
        fork_probe=clock.fork_probe + (False,) * n,
    )
    loader = dataclasses.replace(manifest.loader, length=8)
    stats = unprofiled_stats(dataclasses.replace(manifest, step_clock=clock, loader=loader), 1.0)
    # Steady: the 3 + 3 unsettled steps of the two whole epochs; each boundary: 65 - 5 * 5 = 40 ms.
    assert (
        stats.reference_steps == 6 and stats.step_ms == pytest.approx(5.0) and stats.consumer_ms == pytest.approx(4.5)
    )
    assert stats.epoch.boundaries_measured == 2 and stats.epoch.restart_ms == pytest.approx(40.0)
    assert stats.epoch_steps_per_s == pytest.approx(1000 * 16 / (2 * 80.0))
