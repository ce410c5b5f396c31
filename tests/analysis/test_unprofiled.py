"""Unprofiled speed, profiler overhead and epoch restarts from the step clock, with exact numbers."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import DATA_DIR

from dlprof.analysis.unprofiled import unprofiled_stats
from dlprof.core.manifest import Epoch, StepClock
from dlprof.results.record import PlainLaunch
from dlprof.trace.discover import load_run


def _manifest():
    return load_run(DATA_DIR / "tiny_dlprof_trace.json").manifest


def test_reference_steps_against_profiled_ones():
    stats = unprofiled_stats(_manifest(), 1.0)
    # after: 0.62 0.6 | 0.58 0.6 0.61 0.59: the first two (1 worker x prefetch 2) are the export's transient, and no
    # step waited. Steady: 4 steps in 2.38 ms, median 0.595; profiled: 1.1 1.0 0.8 -> 1.0; the epoch start at step 0
    # and its 4 settling steps are start-up, not counted.
    assert (stats.reference_steps, stats.profiled_steps, stats.profiled_step_ms) == (4, 3, 1.0)
    assert (stats.step_ms, stats.step_ms_p50) == pytest.approx((0.595, 0.595))
    assert stats.overhead_pct == pytest.approx(100 * (1.0 / 0.595 - 1))
    assert (stats.consumer_ms, stats.wait_ms, stats.cpu_ms) == pytest.approx((0.495, 0.1, 0.8))
    assert stats.steps_per_s == pytest.approx(4000 / 2.38)
    speed = stats.speed
    assert (speed.steps, speed.seconds, speed.transient_steps) == (4, pytest.approx(0.00238), 2)
    assert not speed.trusted  # 4 steps in 2.4 ms: far too short
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
    # The export's segment (8 steps, its 2 first left out) and the epoch's (9 steps, its 5 settling ones left out).
    steady_ms = (0.58 + 0.6 + 0.61 + 0.59 + 0.6 + 0.6 + 4 * 0.6) / 10
    assert stats.reference_steps == 6 + 4 and stats.step_ms == pytest.approx(steady_ms)
    assert stats.speed.transient_steps == 2 + 5
    assert stats.epoch.boundaries_measured == 1
    assert stats.epoch.restart_ms == pytest.approx(100.6 + 10.6 + 3 * 0.6 - 5 * steady_ms)
    assert (stats.epoch.first_batch_ms, stats.epoch.end_ms) == (2.5, 1.5)
    # Over whole 16-step epochs: 16 steady steps and one restart.
    assert stats.epoch_steps_per_s == pytest.approx(16000 / (16 * steady_ms + stats.epoch.restart_ms))


def test_too_few_reference_steps_give_nothing():
    manifest = _manifest()
    clock = manifest.step_clock
    short = StepClock(**{f.name: getattr(clock, f.name)[:10] for f in dataclasses.fields(clock)})
    assert unprofiled_stats(dataclasses.replace(manifest, step_clock=short), 1.0) is None
    assert unprofiled_stats(None, 1.0) is None


def _two_whole_epochs():
    """The tiny trace, then after the window: 2 steps, two whole 8-step epochs (starts at +2, +10, +18), each 40 ms
    over 5 settling steps (15 + 4 * 6.25 ms over a 5 ms step) and 5 ms otherwise; then one step of the next epoch."""
    manifest = _manifest()
    clock = manifest.step_clock
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
    return dataclasses.replace(manifest, step_clock=clock, loader=dataclasses.replace(manifest.loader, length=8))


def test_whole_epochs_after_the_window_are_the_speed():
    stats = unprofiled_stats(_two_whole_epochs(), 1.0)
    # Steady: the 3 + 3 unsettled steps of the two whole epochs; each boundary: 65 - 5 * 5 = 40 ms.
    assert (
        stats.reference_steps == 6 and stats.step_ms == pytest.approx(5.0) and stats.consumer_ms == pytest.approx(4.5)
    )
    assert stats.epoch.boundaries_measured == 2 and stats.epoch.restart_ms == pytest.approx(40.0)
    # All the whole epochs' steps over all their time, the restarts included; the two epochs took the same time.
    assert stats.epoch_steps_per_s == pytest.approx(1000 * 16 / (2 * 80.0))
    whole = stats.epoch.whole_epoch_speed
    assert (whole.steps, whole.seconds, whole.spread_pct) == (16, pytest.approx(0.16), pytest.approx(0.0))
    assert stats.speed.spread_pct == pytest.approx(0.0)  # the two epochs' steady rates: 200 steps/s each


def test_over_whole_epochs_the_spread_is_the_range_of_the_epochs():
    manifest = _manifest()
    clock = manifest.step_clock
    # Two whole 8-step epochs after the window, steady at 5 ms, then 4 ms: the steady steps' spread is the range of
    # the epochs' own rates (250 - 200) over the 6 steps' rate, whatever their sub-windows say.
    first, second = [20.0, 11.25, 11.25, 11.25, 11.25, 5.0, 5.0, 5.0], [20.0, 11.25, 11.25, 11.25, 11.25, 4.0, 4.0, 4.0]
    extra = [5.0, 5.0, *first, *second, 20.0]
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
    assert stats.steps_per_s == pytest.approx(6000 / 27) and stats.reference_steps == 6
    assert stats.speed.spread_pct == pytest.approx(100 * (250 - 200) / (6000 / 27))


# --- hand-written step clocks: the export pause, a bursty pipeline, a consumer that never waits, no workers ------

READY, WAITED = (22.0, 0.5), (39.0, 17.5)  # a step that found its batch waiting, and one that waited for it


def _after(steps, *, num_workers: int, epoch_starts=(), fork_probe=(), length=None):
    """The tiny trace's steps up to the window's end, then ``steps`` ((wall, wait) ms) after it."""
    manifest = _manifest()
    clock = manifest.step_clock
    keep = clock.phase.index("after")
    n = len(steps)
    clock = StepClock(
        phase=clock.phase[:keep] + ("after",) * n,
        wall_ms=clock.wall_ms[:keep] + tuple(wall for wall, _ in steps),
        cpu_ms=clock.cpu_ms[:keep] + (5.0,) * n,
        runq_ms=clock.runq_ms[:keep] + (0.0,) * n,
        wait_ms=clock.wait_ms[:keep] + tuple(wait for _, wait in steps),
        batches=clock.batches[:keep] + (1,) * n,
        epoch_start=clock.epoch_start[:keep] + tuple(i in epoch_starts for i in range(n)),
        fork_probe=clock.fork_probe[:keep] + tuple(i in fork_probe for i in range(n)),
    )
    loader = dataclasses.replace(manifest.loader, num_workers=num_workers, prefetch_factor=2, length=length)
    return dataclasses.replace(manifest, step_clock=clock, loader=loader)


def test_after_the_export_the_surplus_is_left_out_and_the_speed_is_steps_over_time():
    # The I/O-bound run at 2 workers: after the export, 8 steps find batches waiting (22 ms, no wait), one
    # waits a little (one worker's surplus is used up, not the other's), one more finds its batch ready; then steps
    # alternate 39 / 22 ms (two workers deliver close together every 61 ms), ending on a 22 ms step.
    surplus = [READY] * 8 + [(30.0, 8.5), READY]
    stats = unprofiled_stats(_after(surplus + [WAITED, READY] * 80 + [READY], num_workers=2), 1.0)
    # Left out: the 10 surplus steps; timed: 80 whole rounds of 2 steps (the last, lone 22 ms step is no round).
    assert stats.speed.transient_steps == 10 and stats.reference_steps == 160
    assert stats.steps_per_s == pytest.approx(2000 / 61) and stats.step_ms == pytest.approx(30.5)
    assert stats.wait_ms == pytest.approx((17.5 + 0.5) / 2)
    assert stats.consumer_ms == pytest.approx(21.5) and stats.cpu_ms == pytest.approx(5.0)
    assert stats.speed.trusted and stats.speed.spread_pct == pytest.approx(0.0)
    # Without leaving the surplus out, the first 40 steps would have said 35.0 steps/s (+7 %); the first 6, 45.5
    # (+39 %).


def test_a_bursty_pipeline_is_steps_over_time_not_one_over_the_median():
    # 3 workers deliver their batches together every 100 ms: one step waits 34.5 ms (56 ms), two find theirs ready.
    waited = (56.0, 34.5)
    stats = unprofiled_stats(_after([READY] * 6 + [waited, READY, READY] * 61, num_workers=3), 1.0)
    # A queue of 6, then up to the third step that waited (one per worker): 12 left out, 59 rounds timed.
    assert stats.speed.transient_steps == 12 and stats.reference_steps == 177
    assert stats.steps_per_s == pytest.approx(30.0)
    assert stats.step_ms_p50 == 22.0  # 1000 / the median step would say 45.45 steps/s: +52 %
    assert stats.wait_ms == pytest.approx(35.5 / 3) and stats.consumer_ms == pytest.approx(21.5)


def test_a_consumer_that_never_waits_is_steady_after_a_queue():
    stats = unprofiled_stats(_after([(30.0, 0.3)] * 100, num_workers=2), 1.0)
    assert (stats.reference_steps, stats.speed.transient_steps) == (96, 4)
    assert stats.steps_per_s == pytest.approx(1000 / 30)


def test_without_workers_every_step_after_the_window_counts():
    steps = [(80.0, 60.0), (82.0, 62.0)] * 30
    stats = unprofiled_stats(_after(steps, num_workers=0), 1.0)
    assert (stats.reference_steps, stats.speed.transient_steps) == (60, 0)
    assert stats.steps_per_s == pytest.approx(60_000 / (30 * 162))
    # The fork probe's settling steps are left out, as after an epoch start.
    probed = unprofiled_stats(_after(steps, num_workers=0, fork_probe={2}), 1.0)
    assert (probed.reference_steps, probed.speed.transient_steps) == (60 - 5, 5)


def test_an_epoch_start_leaves_out_its_refill_and_settling_steps():
    # 2 workers, after the export: 10 surplus steps, 40 bursty ones; an epoch starts (the first batch takes 300 ms,
    # then the empty queue refills: 2 steps wait 61 ms for both workers' batches), then 40 bursty steps again.
    restart = [(322.0, 300.5), (80.0, 58.5), READY, WAITED, READY, WAITED, READY]
    surplus = [READY] * 8 + [(30.0, 8.5), READY]
    steps = surplus + [WAITED, READY] * 20 + restart + [WAITED, READY] * 20
    stats = unprofiled_stats(_after(steps, num_workers=2, epoch_starts={50}), 1.0)
    # The export's 10; after the epoch start, a queue of 4 and on to its 2nd step that waited (the 8th).
    assert stats.speed.transient_steps == 10 + 7
    assert stats.reference_steps == 40 + 40
    assert stats.steps_per_s == pytest.approx(80 / (40 * 61 / 1000))
    assert stats.epoch.boundaries_measured == 1
    # The boundary's excess: the 7 steps left out after it (322 + 80 + 22 + 39 + 22 + 39 + 22 ms) beyond 7 mean
    # steps.
    assert stats.epoch.restart_ms == pytest.approx(546.0 - 7 * 61 / 2)


def _with_faults(manifest, faults: tuple[int, ...], sys_ms: tuple[float, ...]):
    return dataclasses.replace(
        manifest, step_clock=dataclasses.replace(manifest.step_clock, faults=faults, sys_ms=sys_ms)
    )


def test_a_training_s_one_off_start_up_faults_are_no_level_before_the_window():
    manifest = _after([(30.0, 0.3)] * 100, num_workers=2)
    phases = manifest.step_clock.phase
    # A Hugging Face Trainer's first steps as recorded: thousands of faults in some, then none (its start-up); after
    # the window a few a step. The steps before it kept no level of faults: nothing for the window to have saved.
    start_up = iter((21_350, 4_035, 46_304, 38, 15, 12, 9, 11))
    kernel = iter((295.9, 53.4, 529.7, 1.4, 2.9, 0.4, 0.3, 0.2))
    faults, sys_ms = [], []
    for phase in phases:
        faults.append(next(start_up) if phase == "before" else 5)
        sys_ms.append(next(kernel) if phase == "before" else 0.1)
    pf = unprofiled_stats(_with_faults(manifest, tuple(faults), tuple(sys_ms)), 1.0).page_faults
    assert pf.before_steps == 4, "the tiny trace has 5 steps before its window"
    # Their least: 15 faults and 1.4 ms, where their means (12,598 and 147 ms) would have claimed a 147 ms saving.
    assert (pf.before_faults_per_step, pf.before_sys_ms) == (15, pytest.approx(1.4))
    assert pf.window_saved_ms == pytest.approx(1.3)


def test_page_faults_are_measured_over_the_steady_steps_and_before_the_window():
    manifest = _after([(30.0, 0.3)] * 100, num_workers=2)
    clock = manifest.step_clock
    phases = clock.phase
    # Before the window: 50 000 faults at start-up (left out), then 9 000 and 2 ms a step; after it, the 4 steps of
    # the export's transient take 1 000, and the 96 steady ones 4 000 faults and 3 ms (10 % of the 30 ms step).
    after = phases.index("after")
    faults, sys_ms = [], []
    for i, phase in enumerate(phases):
        if phase == "before":
            faults.append(50_000 if i == 0 else 9_000)
            sys_ms.append(9.0 if i == 0 else 2.0)
        elif phase == "after":
            faults.append(1_000 if i < after + 4 else 4_000)
            sys_ms.append(0.5 if i < after + 4 else 3.0)
        else:
            faults.append(20_000)
            sys_ms.append(7.0)
    stats = unprofiled_stats(_with_faults(manifest, tuple(faults), tuple(sys_ms)), 1.0)
    pf = stats.page_faults
    before = phases.count("before") - 1
    assert before >= 3, "the tiny trace has steps before its window"
    assert (pf.faults_per_step, pf.sys_ms, pf.sys_pct) == pytest.approx((4_000, 3.0, 10.0))
    assert (pf.before_faults_per_step, pf.before_sys_ms) == pytest.approx((9_000, 2.0))
    assert pf.volatile
    # The 4 steps before the window, less their data wait: (1.2 + 1.1 * 3) / 4; the window saved no kernel time here.
    assert (pf.before_steps, pf.before_consumer_ms, pf.window_saved_ms) == (4, pytest.approx(1.125), 0.0)
    # A little kernel time is no page-fault level to speak of: 4 % of the step, or 4 % with few faults.
    quiet = unprofiled_stats(
        _with_faults(manifest, tuple(faults), tuple(1.2 if p == "after" else s for p, s in zip(phases, sys_ms))), 1.0
    )
    assert quiet.page_faults.sys_pct == pytest.approx(4.0) and not quiet.page_faults.volatile
    few = unprofiled_stats(
        _with_faults(manifest, tuple(900 if p == "after" else f for p, f in zip(phases, faults)), tuple(sys_ms)), 1.0
    )
    assert few.page_faults.faults_per_step == 900 and not few.page_faults.volatile


def test_the_kernel_time_a_profiler_window_saved():
    manifest = _after([(30.0, 0.3)] * 100, num_workers=2)
    phases = manifest.step_clock.phase
    # 6 000 faults and 8 ms of kernel time a step before the window, 50 and 0.5 ms after it: 7.5 ms saved per step.
    faults = tuple(6_000 if p == "before" else 50 for p in phases)
    sys_ms = tuple(8.0 if p == "before" else 0.5 for p in phases)
    pf = unprofiled_stats(_with_faults(manifest, faults, sys_ms), 1.0).page_faults
    assert pf.window_saved_ms == pytest.approx(7.5) and not pf.volatile


def test_recordings_without_page_faults_have_none():
    assert unprofiled_stats(_after([(30.0, 0.3)] * 100, num_workers=2), 1.0).page_faults is None


def _plain(manifest, scale: float, steps: int | None = None) -> PlainLaunch:
    """A plain launch whose steps took ``scale`` times the recording's (its first ``steps`` only)."""
    walls = manifest.step_clock.wall_ms[:steps]
    return PlainLaunch(
        trace="t.pt.trace.json.gz", step_ms=tuple(scale * w for w in walls), stop_step=len(walls), exit_code=0
    )


def test_a_plain_launch_is_compared_over_the_same_steady_steps():
    manifest = _after([(80.0, 60.0), (82.0, 62.0)] * 30, num_workers=0)
    # The plain launch took 1.1 times as long over every step: the recording ran them 10 % faster.
    stats = unprofiled_stats(manifest, 1.0, _plain(manifest, 1.1))
    plain = stats.plain_launch
    assert plain.steps == stats.reference_steps == 60
    assert plain.recorded_steps_per_s == pytest.approx(stats.steps_per_s)
    assert plain.plain_steps_per_s == pytest.approx(stats.steps_per_s / 1.1)
    assert plain.after_effect_pct == pytest.approx(10.0)
    assert plain.epoch_after_effect_pct is None  # no whole epochs were timed
    # Without a plain launch, nothing.
    assert unprofiled_stats(manifest, 1.0).plain_launch is None


def test_a_plain_launch_that_ended_early_is_compared_over_the_steps_it_timed():
    manifest = _after([(80.0, 60.0), (82.0, 62.0)] * 30, num_workers=0)
    first = manifest.step_clock.phase.index("after")
    # It timed the first 20 reference steps only (10 of 80 ms, 10 of 82), each 20 % slower.
    stats = unprofiled_stats(manifest, 1.0, _plain(manifest, 1.2, first + 20))
    plain = stats.plain_launch
    assert plain.steps == 20
    assert plain.recorded_steps_per_s == pytest.approx(20_000 / (10 * 162))
    assert plain.plain_steps_per_s == pytest.approx(20_000 / (10 * 162 * 1.2))
    # Fewer than 3 steps in common: nothing to compare.
    assert unprofiled_stats(manifest, 1.0, _plain(manifest, 1.2, first + 2)).plain_launch is None


def test_a_plain_launch_is_compared_over_whole_epochs_too():
    manifest = _two_whole_epochs()
    clock = manifest.step_clock
    # The plain launch ran the steady steps at the recording's speed but its epoch starts 20 ms slower each.
    walls = list(clock.wall_ms)
    for i, started in enumerate(clock.epoch_start):
        if started and clock.phase[i] == "after":
            walls[i] += 20.0
    launch = PlainLaunch(trace="t.pt.trace.json.gz", step_ms=tuple(walls), stop_step=len(walls), exit_code=0)
    plain = unprofiled_stats(manifest, 1.0, launch).plain_launch
    assert plain.after_effect_pct == pytest.approx(0.0)
    # Two whole 80 ms epochs (16 steps at 100 steps/s) took 200 ms in the plain launch: 80 steps/s, +25 %.
    assert plain.epoch_steps == 16
    assert (plain.recorded_epoch_steps_per_s, plain.plain_epoch_steps_per_s) == pytest.approx((100.0, 80.0))
    assert plain.epoch_after_effect_pct == pytest.approx(25.0)
