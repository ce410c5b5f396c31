"""The unprofiled speed as the reports print it: steps over time, the steady steps it rests on, its spread, trust."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from dlprof.report.json_report import _unprofiled
from dlprof.report.speed import epoch_line, page_faults_line, plain_launch_line, unprofiled_line
from dlprof.results.analysis import EpochStats, PageFaults, PlainLaunchStats, Throughput, UnprofiledStats


def _run(speed: Throughput, distrust: str | None = None, epoch: EpochStats | None = None):
    return SimpleNamespace(
        unprofiled=UnprofiledStats(
            reference_steps=speed.steps,
            step_ms=1000 / speed.steps_per_s,
            profiled_steps=20,
            step_ms_p50=22.0,
            profiled_step_ms=33.0,
            consumer_ms=21.5,
            wait_ms=8.9,
            cpu_ms=5.0,
            runq_ms=0.0,
            epoch=epoch,
            speed=speed,
            distrust=distrust,
        )
    )


def test_a_trusted_speed_with_its_steady_steps_and_spread():
    line = unprofiled_line(
        _run(Throughput(steps_per_s=31.9, steps=212, seconds=6.646, spread_pct=3.04, transient_steps=8))
    )
    assert line == (
        "without the profiler: 31.90 steps/s (31.35 ms per step) over 212 steady reference steps (6.6 s, 8 left out"
        " after pauses), spread 3.0 %; profiling made steps 50 % slower: 33.00 ms profiled vs 22.00 ms unprofiled"
        " (medians)"
    )


def test_an_untrusted_speed_says_why():
    speed = Throughput(steps_per_s=31.9, steps=30, seconds=0.94, spread_pct=12.5, transient_steps=10, trusted=False)
    line = unprofiled_line(_run(speed, "only 30 steady steps (fewer than 40)"))
    assert "over 30 steady reference steps (940.0 ms, 10 left out after pauses), spread 12.5 %" in line
    assert "; not to be trusted: only 30 steady steps (fewer than 40);" in line


def test_the_whole_epochs_speed_is_in_the_epoch_line():
    epoch = EpochStats(
        steps_per_epoch=54.0,
        persistent_workers=False,
        num_workers=2,
        restart_ms=800.0,
        boundaries_measured=2,
        first_batch_ms=700.0,
        end_ms=5.0,
        whole_epoch_steps_per_s=14.1,
        whole_epoch_speed=Throughput(steps_per_s=14.1, steps=108, seconds=7.66, spread_pct=2.5),
    )
    line = epoch_line(_run(Throughput(steps_per_s=18.2, steps=80, seconds=4.4, spread_pct=3.0), epoch=epoch))
    assert line.endswith("; over 108 steps of whole epochs (7.7 s): 14.10 steps/s, spread 2.5 %")


def test_page_faults_are_named_when_the_speed_rests_on_them():
    faults = PageFaults(
        faults_per_step=9_812.4,
        sys_ms=21.33,
        sys_pct=24.2,
        before_faults_per_step=10_400.0,
        before_sys_ms=22.0,
        volatile=True,
    )
    run = _run(Throughput(steps_per_s=15.2, steps=98, seconds=6.4, spread_pct=2.0))
    run.unprofiled = dataclasses.replace(run.unprofiled, page_faults=faults)
    assert page_faults_line(run) == (
        "the main process took 9,812 page faults per step, 21.3 ms of kernel time (24 % of the step) (before the"
        " window: at least 10,400 and 22.0 ms): glibc's malloc maps and unmaps the step's memory at a level each"
        " process settles on by chance (a profiler window can lower it), so a launch of this training may run faster"
        " or slower by up to that share; MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 in the"
        " environment (or jemalloc) steadies it and saves most of that time"
    )
    assert _unprofiled(run.unprofiled)["page_faults"] == {
        "faults_per_step": 9812.4,
        "sys_ms": 21.33,
        "sys_pct": 24.2,
        "before_faults_per_step": 10400.0,
        "before_sys_ms": 22.0,
        "volatile": True,
    }
    # A level too small to move the speed is kept in the JSON, and not printed.
    run.unprofiled = dataclasses.replace(run.unprofiled, page_faults=dataclasses.replace(faults, volatile=False))
    assert page_faults_line(run) is None and _unprofiled(run.unprofiled)["page_faults"]["volatile"] is False
    run.unprofiled = dataclasses.replace(run.unprofiled, page_faults=None)
    assert page_faults_line(run) is None and _unprofiled(run.unprofiled)["page_faults"] is None


def test_a_plain_launch_is_said_beside_the_unprofiled_speed_and_kept_in_json():
    run = _run(Throughput(steps_per_s=8.72, steps=96, seconds=11.0, spread_pct=9.9))
    assert plain_launch_line(run) is None and _unprofiled(run.unprofiled)["plain_launch"] is None
    plain = PlainLaunchStats(
        steps=96,
        recorded_steps_per_s=8.72,
        plain_steps_per_s=7.54,
        epoch_steps=108,
        recorded_epoch_steps_per_s=7.90,
        plain_epoch_steps_per_s=7.08,
    )
    run.unprofiled = dataclasses.replace(run.unprofiled, plain_launch=plain)
    assert plain_launch_line(run) == (
        "a plain launch of the same command ran the same 96 steady steps at 7.54 steps/s, the recording at 8.72:"
        " recording changed them by +15.6 %; over 108 steps of whole epochs 7.08 against 7.90 steps/s (+11.6 %); the"
        " predictions are the plain launch's"
    )
    assert _unprofiled(run.unprofiled)["plain_launch"] == {
        "steps": 96,
        "steps_per_s": 7.54,
        "recorded_steps_per_s": 8.72,
        "after_effect_pct": 15.65,
        "epoch_steps": 108,
        "epoch_steps_per_s": 7.08,
        "recorded_epoch_steps_per_s": 7.9,
        "epoch_after_effect_pct": 11.58,
    }
    # Without whole epochs compared, the steady steps only.
    run.unprofiled = dataclasses.replace(
        run.unprofiled, plain_launch=PlainLaunchStats(steps=40, recorded_steps_per_s=10.0, plain_steps_per_s=10.5)
    )
    assert plain_launch_line(run) == (
        "a plain launch of the same command ran the same 40 steady steps at 10.50 steps/s, the recording at 10.00:"
        " recording changed them by -4.8 %; the predictions are the plain launch's"
    )
