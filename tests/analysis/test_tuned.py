"""The training after its trials (``--then best|keep``) measured from hand-written step clocks, every expected number
worked out by hand: the steps after the switch as a segment is measured, held against the setting's trial."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analysis.test_trials import clock
from dlprof.analysis.trials import trials_result
from dlprof.analysis.tuned import HELD_PCT, STILL_TRAINING, tuned_run
from dlprof.core.manifest import LoaderConfig, Manifest, Then, Trials, TrialSegment
from dlprof.core.schema import STATUS_COMPLETE, STATUS_TRAINING

#: A step that creates an iterator (the switch, an epoch start): the workers' first batch, 280 ms of waiting.
FIRST = (300.0, 280.0)


def manifest(
    after: list[tuple[float, float]],
    then: Then,
    epoch_starts: tuple[int, ...] = (),
    status: str = STATUS_COMPLETE,
    last_workers: int | None = None,
) -> Manifest:
    """The script's own num_workers=2 (prefetch 2, workers restarting), 10 reference steps, then the trials (one round):
    num_workers=0 for 60 steps of 40 ms, num_workers=2 for 100 steps of 25 ms (and, with ``last_workers``, that count
    for 100 steps of 25 ms); then ``after``, the steps after the trials (``epoch_starts`` counted from their first)."""
    steps = [(30.0, 1.0)] * 10
    segments = []
    for workers, step in ((0, (40.0, 20.0)), (2, (25.0, 0.1)), (last_workers, (25.0, 0.1))):
        if workers is None:
            continue
        count = 60 if workers == 0 else 100
        segments.append(
            TrialSegment(num_workers=workers, persistent_workers=False, round=0, first_step=len(steps), steps=count)
        )
        steps += [step] * count
    end = len(steps)
    assert then.trials_end_step == end
    trials = Trials(
        counts=tuple(s.num_workers for s in segments),
        rounds=1,
        trial_steps=100,
        persistent=False,
        loader=0,
        segments=tuple(segments),
        then=then,
    )
    loader = LoaderConfig(id=0, num_workers=2, prefetch_factor=2, persistent_workers=False)
    return Manifest(
        manifest_version=7,
        status=status,
        loader=loader,
        step_clock=clock(steps + after, tuple(end + i for i in epoch_starts)),
        trials=trials,
    )


#: The trials' end: 10 reference steps, 60 at num_workers=0, 100 at num_workers=2.
END = 170
#: Five steps at the trials' last setting while the choice is made, then the switch to num_workers=2 at step 175.
BEST = Then(
    mode="best", trials_end_step=END, num_workers=2, prefetch_factor=2, persistent_workers=False, first_step=175
)


def _after(step_ms: float, epoch_at: int = 95, steps: int = 155) -> list[tuple[float, float]]:
    """Five steps at the last segment's setting, then ``steps`` from the switch: its first batch, steady steps of
    ``step_ms``, and an epoch start ``epoch_at`` steps after the switch (its first batch again)."""
    after = [(25.0, 0.1)] * 5 + [FIRST] + [(step_ms, 0.1)] * (steps - 1)
    if epoch_at < steps:
        after[5 + epoch_at] = FIRST
    return after


def test_the_speed_after_the_switch_is_measured_as_a_segment_and_held():
    run = tuned_run(manifest(_after(26.0), BEST, epoch_starts=(100,)), _settings(), 1.0)
    # The trials: num_workers=2, 5 steps left out after its switch (a queue of 4, then the workers' forking: 5),
    # 95 steady steps of 25 ms: 40 steps/s, trusted.
    assert run.trial_steps_per_s == pytest.approx(40.0)
    # After the switch at step 175: its first batch and 4 more left out (the queue of 2 workers x prefetch 2, then
    # forking: 5), and as many after the epoch start 95 steps on (workers restart): 90 + 55 steady steps of 26 ms.
    assert (run.mode, run.num_workers, run.persistent_workers, run.first_step) == ("best", 2, False, 175)
    assert (run.steps, run.steps_at_setting) == (160, 155)
    assert run.speed.steps_per_s == pytest.approx(1000 / 26)
    assert (run.speed.steps, run.speed.transient_steps, run.speed.spread_pct) == (145, 10, pytest.approx(0.0))
    assert run.speed.seconds == pytest.approx(145 * 0.026)
    assert run.change_pct == pytest.approx(100 * (1000 / 26 - 40) / 40)  # -3.85 %: within HELD_PCT
    assert run.held is True and run.error is None and run.steps_per_s == run.speed.steps_per_s


def test_more_than_held_pct_below_its_trial_did_not_hold():
    run = tuned_run(manifest(_after(30.0), BEST, epoch_starts=(100,)), _settings(), 1.0)
    assert run.speed.steps_per_s == pytest.approx(1000 / 30)
    assert run.change_pct == pytest.approx(-100 / 6) and run.change_pct < -HELD_PCT
    assert run.held is False and run.error is None


def test_the_queue_of_the_setting_switched_from_is_left_out_too():
    """The trials ended at num_workers=4: its 8 batches in flight are served first after the switch to 0 workers (no
    workers start: nothing more left out)."""
    then = Then(mode="keep", trials_end_step=270, num_workers=0, persistent_workers=False, first_step=270)
    run = tuned_run(manifest([(40.0, 20.0)] * 100, then, last_workers=4), _settings(last_workers=4), 1.0)
    assert (run.steps, run.steps_at_setting, run.speed.transient_steps, run.speed.steps) == (100, 100, 8, 92)
    assert run.speed.steps_per_s == pytest.approx(25.0) and run.trial_steps_per_s == pytest.approx(25.0)
    assert run.change_pct == pytest.approx(0.0) and run.held is True


def test_a_run_still_training_is_not_measured_yet():
    run = tuned_run(manifest(_after(26.0, steps=3), BEST, status=STATUS_TRAINING), _settings(), 1.0)
    assert (run.steps, run.steps_at_setting, run.first_step) == (8, 3, 175)
    assert run.speed is None and run.change_pct is None and run.held is None and run.error == STILL_TRAINING
    pending = replace(BEST, num_workers=None, prefetch_factor=None, persistent_workers=None, first_step=None)
    run = tuned_run(manifest([(25.0, 0.1)] * 2, pending, status=STATUS_TRAINING), _settings(), 1.0)
    assert run.error == f"{STILL_TRAINING} (no switch yet)" and run.num_workers is None and run.steps_at_setting == 0
    assert run.trial_steps_per_s is None


def test_no_switch_says_why():
    then = replace(BEST, first_step=None, error="the training ended before the choice")
    run = tuned_run(manifest([(25.0, 0.1)] * 4, then), _settings(), 1.0)
    assert (run.steps, run.steps_at_setting, run.speed, run.held) == (4, 0, None, None)
    assert run.error == "no switch: the training ended before the choice"
    run = tuned_run(manifest([(25.0, 0.1)] * 4, replace(then, error=None)), _settings(), 1.0)
    assert run.error == "no switch: the training went on at the trials' last setting"
    # A training killed after its trials: the recording it wrote when they ended has no step after them.
    run = tuned_run(manifest([], replace(then, error=None)), _settings(), 1.0)
    assert run.steps == 0 and run.error == (
        "no step after the trials was recorded: this is the recording written when the trials ended (the one the"
        " training's end would have written was not: it was killed, or that write failed)"
    )


def test_too_few_steps_after_the_switch():
    run = tuned_run(manifest(_after(26.0, steps=20), BEST), _settings(), 1.0)
    assert run.speed is None and run.held is None and run.change_pct is None
    assert run.error == "15 steady steps in 0.39 s after the switch: too few to measure (at least 40 steps and 2 s)"
    run = tuned_run(manifest(_after(26.0, steps=4), BEST), _settings(), 1.0)
    assert run.error == "no steady steps after the switch (every step was refill transient)"


def test_untrusted_or_untried_is_not_held_either_way():
    # 50 steady steps of 20 ms, then 50 of 40 ms: the four parts' rates 50, 50, 25, 25 steps/s, 75 % of 33.3.
    after = [(25.0, 0.1)] * 5 + [FIRST] + [(20.0, 0.1)] * 54 + [(40.0, 0.1)] * 50
    run = tuned_run(manifest(after, BEST), _settings(), 1.0)
    assert run.speed.steps_per_s == pytest.approx(100 / 3) and run.speed.spread_pct == pytest.approx(75.0)
    assert run.change_pct == pytest.approx(100 * (100 / 3 - 40) / 40) and run.held is None
    assert run.error == "its rate after the switch varied 75 % (more than 10 %): too wide to trust"
    # A count not tried: nothing to hold the speed against.
    untried = replace(BEST, num_workers=1)
    run = tuned_run(manifest(_after(26.0, epoch_at=999), untried), _settings(), 1.0)
    assert run.num_workers == 1 and run.trial_steps_per_s is None and run.trial_persistent_workers is None
    assert run.speed.steps_per_s == pytest.approx(1000 / 26) and run.change_pct is None and run.held is None
    assert run.error == "no trial of this count measured it: nothing to compare with"


def test_persistent_workers_not_tried_are_held_against_the_same_count():
    # --then best advised persistent workers at 2, which the trials tried without: inside an epoch, where both speeds
    # are measured, the same loader runs, so the speed after the switch (26 ms a step) is held against that trial's
    # (25 ms): -3.85 %, held; the run says which trial it was.
    run = tuned_run(manifest(_after(26.0, epoch_at=999), replace(BEST, persistent_workers=True)), _settings(), 1.0)
    assert run.persistent_workers is True and run.trial_persistent_workers is False
    assert run.trial_steps_per_s == pytest.approx(40.0)
    assert run.change_pct == pytest.approx(100 * (1000 / 26 - 40) / 40) and run.held is True and run.error is None
    # Its own trial, where there is one: no other named.
    assert tuned_run(manifest(_after(26.0, epoch_at=999), BEST), _settings(), 1.0).trial_persistent_workers is None


def _with_faults(built: Manifest, level: dict[range, tuple[int, float]]) -> Manifest:
    """``built`` with page faults and kernel ms per step: (faults, ms) for the steps of each range, 0 elsewhere."""
    count = len(built.step_clock)
    per_step = [next((v for r, v in level.items() if i in r), (0, 0.0)) for i in range(count)]
    columns = {"faults": tuple(f for f, _ in per_step), "sys_ms": tuple(ms for _, ms in per_step)}
    return replace(built, step_clock=replace(built.step_clock, **columns))


def test_page_faults_after_the_switch_beside_its_trial():
    """The trial of num_workers=2 (steps 70-169) at 6,000 faults and 15 ms of kernel time a step; after the switch
    (175 on) 8,000 and 20 ms, but for the left-out steps 175-179 (at 50,000: never counted)."""
    built = manifest(_after(26.0, epoch_at=999), BEST)
    levels = {range(70, 170): (6000, 15.0), range(175, 180): (50000, 90.0), range(180, 400): (8000, 20.0)}
    result = trials_result(_with_faults(built, levels), 1.0)
    faults = result.tuned.fault_levels
    # The trial's steady steps: 75-169 (five left out after its switch); after the switch: 180-329.
    assert (faults.trial_faults_per_step, faults.trial_sys_ms) == (6000, 15.0)
    assert (faults.faults_per_step, faults.sys_ms, faults.moved) == (8000, 20.0, True)
    # 16.4 ms against 15: within LEVEL_MOVED_PCT (10 %) of the trial's kernel time: not moved.
    near = trials_result(_with_faults(built, {**levels, range(180, 400): (8000, 16.4)}), 1.0).tuned.fault_levels
    assert near.sys_ms == pytest.approx(16.4) and near.moved is False
    # Fewer than VOLATILE_FAULTS (1,000) faults a step on both sides: no malloc level to speak of.
    few = {range(70, 170): (600, 1.0), range(180, 400): (900, 3.0)}
    assert trials_result(_with_faults(built, few), 1.0).tuned.fault_levels.moved is False
    # Without the trials' steady steps (or a step clock without faults) nothing is compared.
    assert tuned_run(_with_faults(built, levels), result.settings, 1.0).fault_levels is None
    assert trials_result(built, 1.0).tuned.fault_levels is None


def _with_cpu(built: Manifest, cpu_ms: dict[range, float]) -> Manifest:
    """``built`` with the main process's CPU ms per step: that of the steps of each range, 1 elsewhere."""
    per_step = [next((v for r, v in cpu_ms.items() if i in r), 1.0) for i in range(len(built.step_clock))]
    return replace(built, step_clock=replace(built.step_clock, cpu_ms=tuple(per_step)))


def test_cpu_time_per_step_after_the_switch_beside_its_trial():
    """The trial of num_workers=2: 25 ms steps (steady: 75-169); after the switch 26 ms steps (steady: 180-329). The
    training's own speed moved only where the CPU time per step moved by 10 % or more with as many cores busy."""
    built = manifest(_after(26.0, epoch_at=999), BEST)
    # 57.2 ms on 2.2 cores against 50 on 2: 14.4 % more CPU time, but 10 % more cores busy: not the work's cost alone.
    busier = trials_result(_with_cpu(built, {range(70, 170): 50.0, range(175, 400): 57.2}), 1.0).tuned.cpu_levels
    assert (busier.trial_cpu_ms, busier.cpu_ms) == (pytest.approx(50.0), pytest.approx(57.2))
    assert (busier.trial_cores, busier.cores) == (pytest.approx(2.0), pytest.approx(2.2))
    assert busier.cpu_per_step_moved is False
    # 52 ms against 50, both on 2 cores: 4 % apart.
    slight = trials_result(_with_cpu(built, {range(70, 170): 50.0, range(175, 400): 52.0}), 1.0).tuned.cpu_levels
    assert slight.cores == pytest.approx(2.0) and slight.cpu_per_step_moved is False
    # 57.2 ms on 2.2 cores against 55 ms on 2.2 cores: 4 % apart.
    same = trials_result(_with_cpu(built, {range(70, 170): 55.0, range(175, 400): 57.2}), 1.0).tuned.cpu_levels
    assert (same.trial_cores, same.cores) == (pytest.approx(2.2), pytest.approx(2.2))
    assert same.trial_cpu_ms == pytest.approx(55.0) and same.cpu_per_step_moved is False
    far = trials_result(_with_cpu(built, {range(70, 170): 50.0, range(175, 400): 56.5}), 1.0).tuned.cpu_levels
    # 56.5 ms over 26: 2.17 cores against 2.0, 8.7 % apart (beyond CORES_SAME_PCT): not said either.
    assert far.cpu_per_step_moved is False
    # Twice as slow on twice the CPU time, both cores busy: the training's own speed.
    slow = manifest(_after(50.0, epoch_at=999), BEST)
    halved = trials_result(_with_cpu(slow, {range(70, 170): 50.0, range(175, 400): 100.0}), 1.0).tuned
    assert halved.held is False and halved.cpu_levels.cpu_per_step_moved is True
    assert (halved.cpu_levels.cpu_ms, halved.cpu_levels.cores) == (pytest.approx(100.0), pytest.approx(2.0))
    # Without the trials' steady steps nothing is compared.
    assert tuned_run(built, trials_result(built, 1.0).settings, 1.0).cpu_levels is None


def test_the_trials_result_carries_it():
    built = manifest(_after(26.0), BEST, epoch_starts=(100,))
    result = trials_result(built, 1.0)
    # With the trials' steady steps, its CPU time beside the trial's too.
    assert replace(result.tuned, cpu_levels=None) == tuned_run(built, result.settings, 1.0) and result.tuned.held
    assert result.tuned.cpu_levels is not None
    stopped = replace(built, trials=replace(built.trials, then=None))
    assert trials_result(stopped, 1.0).tuned is None and tuned_run(stopped, (), 1.0) is None


def _settings(last_workers: int | None = None):
    """The trials' measured settings of :func:`manifest`'s run."""
    then = replace(BEST, trials_end_step=270 if last_workers else END)
    return trials_result(manifest([], then, last_workers=last_workers), 1.0).settings
