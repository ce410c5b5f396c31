"""When the reference phase ends, and how every rank follows one rank's plan (in process, without a profiler)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from dlprof.capture import probe, trial_plan
from dlprof.capture.rank_env import RankEnv
from dlprof.capture.recorder import Recorder, TrainingStopped
from dlprof.capture.step_clock import StepRow
from dlprof.core.manifest import MAX_REFERENCE_FACTOR, PHASE_AFTER, Schedule
from dlprof.results.record import TrialRequest


def _recorder(tmp_path, rank=0, world=1, reference_steps=20, trials=None) -> Recorder:
    recorder = Recorder(
        Schedule(1, 1, 1),
        tmp_path,
        RankEnv(rank, world, rank, world),
        reference_steps=reference_steps,
        run_to_end=False,
        trials=trials,
    )
    recorder.exported = True  # past the window: what follows are the reference steps
    return recorder


def _steps(recorder: Recorder, count: int, wall_ms: float, wait_ms: float = 0.0) -> None:
    """``count`` unprofiled steps after the window."""
    for _ in range(count):
        recorder.all_steps.append(
            StepRow(
                phase=PHASE_AFTER,
                wall_ns=int(wall_ms * 1e6),
                cpu_ns=0,
                runq_ns=0,
                wait_ns=int(wait_ms * 1e6),
                batches=1,
                epoch_start=False,
                fork_probe=False,
                ready=-1,
                faults=0,
                sys_ns=0,
                wait_others_cpu_ns=0,
                thread_cpu_ns=0,
            )
        )
        recorder._steps_after_window += 1


@pytest.fixture
def no_loader():
    probe.uninstall()  # no DataLoader registered: the steps are all there is to go by


def test_the_reference_phase_lasts_until_the_speed_is_measured_well_enough(tmp_path, no_loader):
    recorder = _recorder(tmp_path, reference_steps=20)
    _steps(recorder, 20, wall_ms=60)
    assert not recorder.reference_done()  # the 20 steps asked for, but fewer than throughput.MIN_STEPS (40)
    _steps(recorder, 19, wall_ms=60)
    assert not recorder.reference_done()
    _steps(recorder, 1, wall_ms=60)
    assert recorder.reference_done()  # 40 steps of 60 ms: 2.4 s, enough


def test_the_reference_phase_is_bounded(tmp_path, no_loader):
    recorder = _recorder(tmp_path, reference_steps=20)
    _steps(recorder, MAX_REFERENCE_FACTOR * 20 - 1, wall_ms=10)  # 10 ms steps: 2 s only after 200 of them
    assert not recorder.reference_done()
    _steps(recorder, 1, wall_ms=10)
    assert recorder.reference_done()


def test_several_machines_decide_by_step_counts_alone(tmp_path, no_loader):
    recorder = Recorder(Schedule(1, 1, 1), tmp_path, RankEnv(2, 4, 0, 2), reference_steps=20, run_to_end=False)
    assert recorder.deterministic and recorder.decider  # the first rank of its machine
    recorder.exported = True
    _steps(recorder, 20, wall_ms=10)
    assert recorder.reference_done()
    assert not Recorder(Schedule(1, 1, 1), tmp_path, RankEnv(3, 4, 1, 2)).decider


def test_rank_0_decides_a_few_steps_ahead_and_the_others_follow(tmp_path, no_loader):
    leader, follower = _recorder(tmp_path, 0, 2), _recorder(tmp_path, 1, 2)
    assert leader.decider and not follower.decider
    _steps(follower, 80, wall_ms=60)
    follower._follow_plan()  # nothing published yet: the follower trains on, whatever its own clocks say
    assert follower.plan is None
    _steps(leader, 40, wall_ms=60)
    leader._follow_plan()
    plan = trial_plan.read_plan(tmp_path)
    assert plan == leader.plan and plan.decided_at == 40 and plan.stop_step == 40 + trial_plan.RANK_MARGIN_STEPS
    for recorder in (leader, follower):
        while len(recorder.all_steps) < plan.stop_step:
            recorder._follow_plan()
            _steps(recorder, 1, wall_ms=60)
    with pytest.raises(TrainingStopped):
        leader._follow_plan()
    # The follower read the plan at step 80, past its stop step: it stops at once.
    with pytest.raises(TrainingStopped):
        follower._follow_plan()
    assert leader.stopped_early and follower.stopped_early


def test_a_rank_that_reads_the_plan_late_switches_at_once_and_says_so(tmp_path):
    probe.install(str(tmp_path / "spans"))
    try:
        loader = DataLoader(torch.arange(400.0), batch_size=4)
        iterator = iter(loader)
        next(iterator)
        request = TrialRequest(counts=(0, 1), rounds=1, trial_steps=10)
        facts = trial_plan.LoaderFacts(num_workers=0, prefetch_factor=None, batches_per_step=1.0)
        plan = trial_plan.plan_trials(request, facts, 30, 0.05, (27, 0))
        trial_plan.write_plan(tmp_path, plan)
        follower = _recorder(tmp_path, 1, 2, trials=request)
        _steps(follower, 35, wall_ms=60)
        follower._follow_plan()
        run = follower.trial_runner
        assert run is not None and run.requested == {0} and "5 steps after the trials began" in run.notes[0]
        next(iterator)  # the switch (to num_workers 0, its own) lands in the step under way
        assert run.applied[0].first_step == 35
        trials = follower._trials("complete", None)
        assert trials.segments[0].first_step == 35 and trials.incomplete.startswith("the training ended by itself")
        assert trials.notes == tuple(run.notes)
    finally:
        probe.uninstall()
