"""The in-process trials measured from hand-written step clocks, every expected number worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import DATA_DIR

from dlprof.analysis.trial_predictions import with_predictions
from dlprof.analysis.trials import trials_result
from dlprof.core.manifest import LoaderConfig, Manifest, MemorySummary, ProcessMemory, StepClock, Trials, TrialSegment
from dlprof.results.advice import Prediction
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS
from dlprof.trace.discover import load_run
from dlprof.workflows.analyze import analyze_run

#: Kept batches right after a switch (the previous setting's, in flight): no wait.
KEPT = [(10.0, 0.1)] * 4
#: Two workers, bursty: one step in three waits for a batch (28 ms), the others find theirs ready. 94 ms a period:
#: 3 / 0.094 = 31.9149 steps/s, where 1000 / the median step (22 ms) would say 45.45.
BURSTY = [(50.0, 28.0), (22.0, 0.1), (22.0, 0.1)]
BURSTY_RATE = 3000 / 94
#: After a switch to two workers: the first batch (workers forking), then five steps on batches that arrived together.
START_2 = [(330.0, 300.0)] + [(22.0, 0.1)] * 5


def clock(steps: list[tuple[float, float]], epoch_starts: tuple[int, ...] = ()) -> StepClock:
    count = len(steps)
    return StepClock(
        phase=("trial",) * count,
        wall_ms=tuple(w for w, _ in steps),
        cpu_ms=(1.0,) * count,
        runq_ms=(0.0,) * count,
        wait_ms=tuple(w for _, w in steps),
        batches=(1,) * count,
        epoch_start=tuple(i in epoch_starts for i in range(count)),
        fork_probe=(False,) * count,
    )


class Plan:
    """Segments appended one after another to a step clock."""

    def __init__(self, reference: int = 10):
        self.steps: list[tuple[float, float]] = [(30.0, 1.0)] * reference  # the reference steps before the trials
        self.segments: list[TrialSegment] = []
        self.epoch_starts: list[int] = []

    def add(self, num_workers: int, persistent: bool, round_: int, steps, boundary_at: int | None = None, **timings):
        first = len(self.steps)
        if boundary_at is not None:
            self.epoch_starts.append(first + boundary_at)
        self.steps += steps
        self.segments.append(
            TrialSegment(
                num_workers=num_workers,
                persistent_workers=persistent,
                round=round_,
                first_step=first,
                steps=len(steps),
                **timings,
            )
        )

    def manifest(self, length: int | None = 60, counts=(0, 2), persistent=True, incomplete=None) -> Manifest:
        loader = LoaderConfig(id=0, num_workers=2, prefetch_factor=2, persistent_workers=False, length=length)
        trials = Trials(
            counts=counts,
            rounds=2,
            trial_steps=40,
            persistent=persistent,
            loader=0,
            segments=tuple(self.segments),
            incomplete=incomplete,
        )
        return Manifest(
            manifest_version=3, loader=loader, step_clock=clock(self.steps, tuple(self.epoch_starts)), trials=trials
        )


def two_rounds() -> Plan:
    """--try-workers 0,2 --try-persistent, two rounds: 0, 2, 2 persistent; then 2 persistent, 2, 0."""
    plan = Plan()
    plan.add(0, False, 0, KEPT + [(40.0, 20.0)] * 48, shutdown_ms=25.0, first_batch_ms=1.0)
    plan.add(2, False, 0, START_2 + BURSTY * 24, shutdown_ms=0.0, start_ms=50.0, first_batch_ms=300.0)
    plan.add(2, True, 0, START_2 + BURSTY * 24, shutdown_ms=30.0, start_ms=50.0, first_batch_ms=310.0)
    plan.add(2, True, 1, START_2 + BURSTY * 24, shutdown_ms=30.0, start_ms=50.0, first_batch_ms=310.0)
    # An epoch ends 42 steps into this segment: the workers restart there (400 ms for the first batch).
    boundary = [(422.0, 400.0)] + [(22.0, 0.1)] * 5
    plan.add(2, False, 1, START_2 + BURSTY * 12 + boundary + BURSTY * 12, boundary_at=42, first_batch_ms=300.0)
    plan.add(0, False, 1, KEPT + [(50.0, 20.0)] * 48, shutdown_ms=30.0, first_batch_ms=1.0)
    return plan


def test_each_setting_is_measured_in_steady_state_over_its_rounds():
    result = trials_result(two_rounds().manifest(), 1.0)
    assert (result.rounds, result.rounds_planned, result.basis) == (2, 2, BASIS_WHOLE_EPOCHS)
    runs = {(r.num_workers, r.persistent_workers): r for r in result.settings}
    assert list(runs) == [(0, False), (2, False), (2, True)]
    zero, two, kept = runs[(0, False)], runs[(2, False)], runs[(2, True)]
    # No workers: the 4 kept batches of the two workers before are left out (the queue: 2 workers x prefetch 2), then
    # 48 steps of 40 ms (25 steps/s) in round 0 and of 50 ms (20 steps/s) in round 1: 96 steps over 4.32 s, and the
    # rounds differ by 5 steps/s, 22.5 % of the rate.
    assert zero.speed.steps_per_s == pytest.approx(96 / 4.32)
    assert (zero.speed.steps, zero.speed.transient_steps) == (96, 8)
    assert zero.speed.spread_pct == pytest.approx(100 * 5 / (96 / 4.32))
    assert not zero.speed.trusted and zero.segments == 2
    # Two workers: after the switch the first batch and the steps on batches that arrived together are left out, up
    # to the second step that waited (one wait per worker: batches come from the workers in turn), 9 steps; so are
    # they after the epoch start inside the second segment. 135 bursty steps: steps over time, not 1000 / the median
    # step.
    assert two.speed.steps_per_s == pytest.approx(BURSTY_RATE)
    assert (two.speed.steps, two.speed.transient_steps, two.speed.spread_pct) == (135, 27, pytest.approx(0.0))
    assert two.speed.trusted
    assert kept.speed.steps_per_s == pytest.approx(BURSTY_RATE) and kept.speed.transient_steps == 18


def test_restarts_and_speeds_over_whole_epochs():
    result = trials_result(two_rounds().manifest(), 1.0)
    zero, two, kept = result.settings
    # Without workers, no restart: over whole epochs as inside one.
    assert zero.restart_ms == 0.0 and zero.epoch_steps_per_s == pytest.approx(zero.steps_per_s)
    # The epoch boundary inside the second segment at 2 workers: its six left-out steps took 422 + 5 x 22 ms, six
    # steady steps 6 x 94 / 3 ms: the restart cost 344 ms. Over 60-step epochs: 60 / (60 / rate + 0.344 s).
    assert two.restart_ms == pytest.approx(532 - 6 * 94 / 3)
    assert two.epoch_steps_per_s == pytest.approx(60 / (60 / BURSTY_RATE + 0.344))
    # Persistent workers, no worker spans: the switches' wait for the first batch less the creation (310 - 50 ms).
    assert kept.restart_ms == pytest.approx(260.0)
    assert kept.epoch_steps_per_s == pytest.approx(60 / (60 / BURSTY_RATE + 0.26))


def test_restart_from_the_switches_without_an_epoch_boundary():
    plan = Plan()
    plan.add(2, False, 0, START_2 + BURSTY * 24, first_batch_ms=300.0)
    plan.add(0, False, 0, KEPT + [(40.0, 20.0)] * 48, shutdown_ms=30.0)
    plan.add(0, False, 1, KEPT + [(40.0, 20.0)] * 48, shutdown_ms=0.0)
    plan.add(2, False, 1, START_2 + [(24.0, 0.1)] + BURSTY * 24, first_batch_ms=340.0)
    result = trials_result(plan.manifest(counts=(0, 2), persistent=False), 1.0)
    two = next(r for r in result.settings if r.num_workers == 2)
    # A switch shuts workers down and starts new ones, as an epoch boundary does: its left-out steps beyond steady
    # ones. Round 0: 330 + 5 x 22 ms for 6 steady steps of 94 / 3 ms; round 1: one more 24 ms step before the first
    # that waited. The median of the two.
    first, second = 330 + 5 * 22 - 6 * 94 / 3, 330 + 5 * 22 + 24 - 7 * 94 / 3
    assert two.restart_ms == pytest.approx((first + second) / 2)
    assert any(note.startswith("restart measured at the switches to it") for note in result.notes)


def test_without_steady_steps_the_restart_comes_from_the_switch_timings():
    plan = Plan()
    plan.add(2, False, 0, START_2[:4], first_batch_ms=300.0)
    plan.add(0, False, 0, KEPT + [(40.0, 20.0)] * 48, shutdown_ms=40.0)
    result = trials_result(plan.manifest(counts=(0, 2), persistent=False), 1.0)
    two = result.settings[1]
    # The median first batch after a switch to it, and the median shut-down of its workers when the trials left it.
    assert two.speed is None and two.restart_ms == pytest.approx(340.0) and two.epoch_steps_per_s is None
    assert any(note.startswith("restart from the switches' timings") for note in result.notes)


def test_without_the_epoch_length_the_settings_are_compared_inside_an_epoch():
    result = trials_result(two_rounds().manifest(length=None), 1.0)
    assert result.basis == BASIS_IN_EPOCH
    assert all(r.epoch_steps_per_s is None for r in result.settings)
    assert result.measured(result.settings[1]) == pytest.approx(BURSTY_RATE)


def test_an_unknown_restart_makes_the_comparison_inside_an_epoch_and_says_why():
    plan = Plan()
    plan.add(0, False, 0, KEPT + [(40.0, 20.0)] * 48)
    plan.add(2, True, 0, START_2 + BURSTY * 24)  # persistent; no switch timings, no worker spans
    result = trials_result(plan.manifest(counts=(0,), persistent=True), 1.0)
    assert result.basis == BASIS_IN_EPOCH and result.settings[1].restart_ms is None
    assert "compared inside an epoch: the restart of num_workers=2 (persistent) is unknown" in result.notes
    assert result.rounds == 1 and "1 of 2 round(s) ran to their end" in result.notes


def test_incomplete_trials_and_settings_without_steady_steps_are_noted():
    plan = Plan()
    plan.add(0, False, 0, KEPT + [(40.0, 20.0)] * 48)
    plan.add(2, False, 0, START_2[:4], first_batch_ms=300.0)  # cut short: all refill transient
    result = trials_result(plan.manifest(counts=(0, 2, 4), persistent=False, incomplete="the training ended"), 1.0)
    assert result.settings[1].speed is None and result.settings[1].steps_per_s is None
    assert result.notes[:3] == (
        "the trials ended early (the training ended): 0 of 2 round(s) ran to their end",
        "num_workers=4: not tried (no segment ran)",
        "num_workers=0: 48 steady steps in 1.92 s, less than 2 s: too short to trust; raise --trial-steps",
    )
    assert "num_workers=2: no steady steps (every step was refill transient); raise --trial-steps" in result.notes
    assert result.basis == BASIS_WHOLE_EPOCHS  # among the settings measured


def test_predictions_on_the_basis_and_their_error():
    result = trials_result(two_rounds().manifest(), 1.0)
    predicted = [
        Prediction(
            num_workers=0, step_ms=41.0, steps_per_s=1000 / 41, bound="main process", epoch_steps_per_s=1000 / 41
        ),
        Prediction(num_workers=1, step_ms=30.0, steps_per_s=33.3, bound="loader", epoch_steps_per_s=30.0),
    ]
    predicted.append(
        Prediction(
            num_workers=2,
            step_ms=30.0,
            steps_per_s=1000 / 30,
            bound="consumer",
            epoch_steps_per_s=27.0,
            restart_ms=300.0,
        )
    )
    zero, two, kept = with_predictions(result, predicted, recorded_persistent=False).settings
    assert zero.predicted_steps_per_s == pytest.approx(1000 / 41)
    assert zero.error_pct == pytest.approx(100 * (1000 / 41 - zero.epoch_steps_per_s) / zero.epoch_steps_per_s)
    assert two.predicted_steps_per_s == pytest.approx(27.0)
    assert two.error_pct == pytest.approx(100 * (27.0 - two.epoch_steps_per_s) / two.epoch_steps_per_s)
    # The model gives persistent workers no restart: over whole epochs, its prediction is the rate inside an epoch.
    assert kept.predicted_steps_per_s == pytest.approx(1000 / 30)
    # Recorded with persistent workers, the model saw no restart: no prediction for workers that restart.
    assert with_predictions(result, predicted, recorded_persistent=True).settings[1].predicted_steps_per_s is None
    inside = with_predictions(trials_result(two_rounds().manifest(length=None), 1.0), predicted, False)
    assert inside.settings[1].predicted_steps_per_s == pytest.approx(1000 / 30)
    assert inside.settings[1].error_pct == pytest.approx(100 * (1000 / 30 - BURSTY_RATE) / BURSTY_RATE)


def test_predictions_at_the_trials_pace_are_scaled_to_the_recorded_settings_own_trials():
    result = trials_result(two_rounds().manifest(), 1.0)
    zero, two = result.settings[0], result.settings[1]
    zero_rate, two_rate = result.measured(zero), result.measured(two)
    assert (zero.num_workers, zero.persistent_workers, two.num_workers, two.persistent_workers) == (0, False, 2, False)
    assert zero_rate and two_rate
    fast = zero_rate * 1.12  # the reference steps ran 12 % faster than the trials at the recorded setting
    ahead = [
        Prediction(num_workers=0, step_ms=1.0, steps_per_s=fast, bound="main process", epoch_steps_per_s=fast),
        Prediction(num_workers=2, step_ms=1.0, steps_per_s=40.0, bound="consumer", epoch_steps_per_s=30.0),
    ]
    paced = with_predictions(result, ahead, False, recorded_workers=0, from_reference_steps=True)
    assert paced.pace is not None
    assert paced.pace.factor == pytest.approx(1 / 1.12) and paced.pace.moved_pct == pytest.approx(12.0)
    zero, two, _ = paced.settings
    # The raw predictions and errors stay; at the pace the recorded setting's is its trials', with no error to show.
    assert zero.error_pct == pytest.approx(12.0) and two.predicted_steps_per_s == pytest.approx(30.0)
    assert zero.paced_steps_per_s == pytest.approx(zero_rate) and zero.paced_error_pct is None
    assert two.paced_steps_per_s == pytest.approx(30.0 / 1.12)
    assert two.paced_error_pct == pytest.approx(100 * (30.0 / 1.12 - two_rate) / two_rate)
    assert [n for n in paced.notes if n.startswith("predicted, at the trials' pace")] == [
        f"predicted, at the trials' pace: the model's predictions x 0.893, so that num_workers=0 (recorded) is"
        f" predicted at what its own trials measured ({zero_rate:.2f} steps/s; from the reference steps after the"
        f" window the model predicted {fast:.2f}, 12.0 % faster): the training's speed moved between the reference"
        " steps and the trials, at one setting in one process; the model's own predictions (its predicted throughput)"
        " carry that move, the trials' rounds share it; the pace rests on a measurement not to be trusted (its rounds"
        " spread 22.5 %): every paced error shares that doubt; error %: the model's own, at the other settings"
    ]
    # Its rounds agreeing, the pace is not doubted.
    assert zero.speed is not None and not result.settings[0].speed.trusted
    steady = replace(result, settings=(replace(result.settings[0], speed=replace(zero.speed, trusted=True)),))
    (note,) = with_predictions(steady, ahead, False, 0, True).notes[-1:]
    assert note.startswith("predicted, at the trials' pace") and "doubt" not in note
    # Within 5 %, or not resting on reference steps: the pace is set and said, the move is not called one.
    close = [replace(ahead[0], steps_per_s=zero_rate * 0.96, epoch_steps_per_s=zero_rate * 0.96), ahead[1]]
    for quiet in (with_predictions(result, close, False, 0, True), with_predictions(result, ahead, False, 0, False)):
        assert quiet.pace is not None
        (note,) = [n for n in quiet.notes if n.startswith("predicted, at the trials' pace")]
        assert "moved" not in note
    assert "4.0 % slower)" in next(n for n in with_predictions(result, close, False, 0, True).notes if "pace" in n)
    assert "from the profiled window" in next(n for n in with_predictions(result, ahead, False, 0).notes if "pace" in n)
    # Recorded count unknown, not tried, or not predicted: no pace, nothing scaled.
    for unpaced in (
        with_predictions(result, ahead, False, None),
        with_predictions(result, ahead, False, 4),
        with_predictions(result, ahead[1:], False, 0),
        with_predictions(result, ahead, True, 0),  # recorded with persistent workers: (0, True) not tried
    ):
        assert unpaced.pace is None and not any("pace" in n for n in unpaced.notes)
        assert all(s.paced_steps_per_s is None and s.paced_error_pct is None for s in unpaced.settings)


def test_a_run_without_trials_has_none():
    manifest = two_rounds().manifest()
    assert trials_result(Manifest(manifest_version=3, step_clock=manifest.step_clock), 1.0) is None
    assert trials_result(None, 1.0) is None


def test_the_hand_written_trace_with_trials():
    """tests/data/tiny_trials_trace.json (scripts/make_trials_trace.py): 40-step epochs, one batch a step."""
    report = analyze_run(load_run(DATA_DIR / "tiny_trials_trace.json"))
    trials = report.trials
    # the reference steps, not the trials' (phase "trial"): 6, of which the 2 after the export pause are left out
    assert (report.unprofiled.reference_steps, report.unprofiled.speed.transient_steps) == (4, 2)
    runs = {(r.num_workers, r.persistent_workers): r for r in trials.settings}
    # No workers: 44 ms steps in round 0, 44.88 in round 1 (2 % slower), 50 each after the 2 kept batches.
    zero = runs[(0, False)]
    assert zero.steps_per_s == pytest.approx(100 / (50 * 0.044 + 50 * 0.04488))
    assert zero.speed.spread_pct == pytest.approx(100 * (1000 / 44 - 1000 / 44.88) / zero.steps_per_s)
    # One worker: the first batch (150 ms) then steps of 24, 24, 27 and 24 ms (2 % slower in round 1) left out after
    # each switch, beyond five steady steps: the restart.
    one = runs[(1, False)]
    steady_ms = 1000 / one.steps_per_s
    switches = [150 + 24 + 24 + 27 + 24 - 5 * steady_ms, 150 + 24 + 24 + 1.02 * (27 + 24) - 5 * steady_ms]
    assert one.restart_ms == pytest.approx(sum(switches) / 2)
    assert one.epoch_steps_per_s == pytest.approx(40 / (40 / one.steps_per_s + one.restart_ms / 1000))
    # Persistent workers: an epoch's first batch is one batch made afresh, 28 ms in the worker's spans.
    assert runs[(2, True)].restart_ms == pytest.approx(28.0)
    # Two workers restarting: measured at the epoch boundary inside the second round's segment.
    assert runs[(2, False)].restart_ms > 170.0
    assert trials.basis == BASIS_WHOLE_EPOCHS and trials.rounds == 2
    assert all(r.predicted_steps_per_s is not None and r.error_pct is not None for r in trials.settings)


def _with_padding_segment(plan: Plan, steps, persistent: bool = True) -> Manifest:
    """``plan``'s trials ending with the padding segment at 0 workers (the last setting), its batches trimmed."""
    plan.add(0, False, 1, steps, trim_padding=True)
    manifest = plan.manifest(persistent=persistent)
    return replace(manifest, trials=replace(manifest.trials, trim_checked=64, trimmable_pct=62.5))


def test_the_padding_segment_is_measured_against_its_setting_padded_and_is_not_a_setting():
    plan = Plan()
    plan.add(0, False, 0, [(40.0, 20.0)] * 48)
    plan.add(2, False, 0, START_2 + BURSTY * 24, start_ms=50.0, first_batch_ms=300.0)
    plan.add(2, False, 1, START_2 + BURSTY * 24, start_ms=50.0, first_batch_ms=300.0)
    plan.add(0, False, 1, KEPT + [(40.0, 20.0)] * 48, shutdown_ms=30.0)
    without = trials_result(plan.manifest(persistent=False), 1.0)
    # No workers started for it: nothing left out but its own transient (none, without workers): 80 steps of 30 ms.
    result = trials_result(_with_padding_segment(plan, [(30.0, 0.1)] * 80, persistent=False), 1.0)
    assert result.settings == without.settings and result.rounds == 2 and result.notes == without.notes
    padding = result.padding
    assert (padding.num_workers, padding.persistent_workers, padding.trimmed_pct) == (0, False, 62.5)
    assert padding.trimmed.steps_per_s == pytest.approx(1000 / 30) and padding.trimmed.transient_steps == 0
    # Padded: 96 steady steps of 40 ms over the two rounds (the 4 kept batches after the switch from 2 left out).
    assert padding.padded_steps_per_s == pytest.approx(25.0)
    assert padding.gain_pct == pytest.approx(100 * (1000 / 30 / 25 - 1)) and padding.trusted
    assert result.padding_not_measured is None
    # Every segment is listed in the manifest's order, the padding segment with its own speed.
    assert [m.segment.trim_padding for m in result.segments] == [False] * 4 + [True]
    assert result.segments[-1].speed == padding.trimmed


def test_a_short_padding_segment_is_not_trusted():
    result = trials_result(_with_padding_segment(two_rounds(), [(30.0, 0.1)] * 20), 1.0)
    assert result.padding.gain_pct is not None and not result.padding.trusted


def test_why_no_padding_segment_was_measured():
    plan = two_rounds()
    manifest = plan.manifest()
    refused = replace(manifest.trials, trim_checked=64, trim_refused="the batches carry no labels: ...")
    result = trials_result(replace(manifest, trials=refused), 1.0)
    assert result.padding is None
    assert result.padding_not_measured == "the trials did not trim the batches: the batches carry no labels: ..."
    cut = replace(manifest.trials, trim_checked=64, trimmable_pct=40.0, incomplete="the training ended")
    assert "ended before" in trials_result(replace(manifest, trials=cut), 1.0).padding_not_measured
    little = replace(manifest.trials, trim_checked=64, trimmable_pct=2.0)
    assert trials_result(replace(manifest, trials=little), 1.0).padding_not_measured is None


def test_each_settings_workers_memory_is_the_most_its_segments_workers_took_together():
    plan = Plan()
    plan.add(0, False, 0, [(40.0, 20.0)] * 48)
    plan.add(2, False, 0, START_2 + BURSTY * 24, worker_pids=(11, 12))
    plan.add(2, False, 1, START_2 + BURSTY * 24, worker_pids=(21, 22))
    plan.add(0, False, 1, KEPT + [(40.0, 20.0)] * 48)
    plan.add(4, False, 1, START_2 + BURSTY * 24, worker_pids=(31, 32, 33, 34))
    peaks = {11: 300.0, 12: 310.0, 21: 320.0, 22: 330.0, 31: 300.0, 32: 300.0, 33: 300.0}  # 34 was never sampled
    memory = MemorySummary(
        processes=tuple(ProcessMemory(pid=pid, role="worker", pss_mib_peak=mib) for pid, mib in peaks.items())
    )
    manifest = replace(plan.manifest(counts=(0, 2, 4), persistent=False), memory=memory)
    limited = replace(manifest, trials=replace(manifest.trials, max_worker_memory_mib=640.0))
    for result, over in ((trials_result(manifest, 1.0), False), (trials_result(limited, 1.0), True)):
        runs = {r.num_workers: r for r in result.settings}
        assert runs[0].workers_pss_mib == 0.0 and not runs[0].over_memory_limit
        assert runs[2].workers_pss_mib == pytest.approx(650.0) and runs[2].over_memory_limit == over
        assert runs[4].workers_pss_mib is None and not runs[4].over_memory_limit  # a worker's memory is unknown
    assert trials_result(limited, 1.0).max_worker_memory_mib == 640.0
    # Each segment's own: its workers' peaks together.
    assert [m.workers_pss_mib for m in trials_result(manifest, 1.0).segments] == [0.0, 610.0, 650.0, 0.0, None]
