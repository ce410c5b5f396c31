"""The recommendation when in-process trials measured: measured speeds for the counts tried, the model's (corrected by
its measured error) between and beyond them, and what the recommendation says it rests on."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import DATA_DIR

from dlprof.advice.measured import candidates, error_scale, persistent_comparison
from dlprof.advice.rules import CHOOSE_WITHIN, WITHIN_BEST, _choose_with_trials
from dlprof.results.advice import RESTS_ON_MEASURED, RESTS_ON_PREDICTED, Prediction
from dlprof.results.analysis import Throughput, UnprofiledStats
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, TrialSetting, TrialsResult
from dlprof.trace.discover import load_run
from dlprof.workflows.analyze import analyze_run


def trial(n: int, rate: float, predicted: float | None, persistent: bool = False, epoch: float | None = None):
    speed = Throughput(steps_per_s=rate, steps=100, seconds=100 / rate, spread_pct=2.0)
    error = None if predicted is None else 100 * (predicted - (epoch or rate)) / (epoch or rate)
    return TrialSetting(
        num_workers=n,
        persistent_workers=persistent,
        speed=speed,
        epoch_steps_per_s=epoch,
        restart_ms=0.0 if epoch else None,
        segments=2,
        predicted_steps_per_s=predicted,
        error_pct=error,
    )


def predictions(*rates: float) -> list[Prediction]:
    return [Prediction(num_workers=n, step_ms=1000 / r, steps_per_s=r, bound="consumer") for n, r in enumerate(rates)]


def result(*runs: TrialSetting, basis: str = BASIS_IN_EPOCH) -> TrialsResult:
    return TrialsResult(rounds=2, rounds_planned=2, basis=basis, settings=runs)


def test_the_models_error_is_interpolated_between_the_counts_tried_with_workers():
    trials = result(trial(0, 20.0, 10.0), trial(2, 36.0, 40.0), trial(4, 32.0, 40.0))
    scale = error_scale(trials, recorded_persistent=False)
    assert scale(0) == 1.0  # never by a ratio measured with workers (and 0's own is not a neighbour's)
    assert [scale(n) for n in (1, 2, 3, 4, 6)] == pytest.approx([0.9, 0.9, 0.85, 0.8, 0.8])
    assert error_scale(result(trial(0, 20.0, 10.0)), False)(3) == 1.0  # nothing measured with workers


def test_measured_where_tried_scaled_predictions_elsewhere():
    trials = result(trial(0, 20.0, 21.0), trial(2, 40.0, 44.0), trial(4, 41.0, 45.1))
    found = candidates(trials, predictions(21.0, 30.0, 44.0, 46.0, 45.1, 45.1), recorded_persistent=False)
    assert [(c.num_workers, c.measured) for c in found] == [(0, True), (1, False), (2, True), (3, False), (4, True)] + [
        (5, False)
    ]
    by_count = {c.num_workers: c for c in found}
    assert by_count[2].steps_per_s == 40.0
    assert by_count[3].steps_per_s == pytest.approx(46.0 * 40 / 44)  # 40/44 at 2 and 41/45.1 at 4: the same ratio
    assert by_count[1].scale == pytest.approx(40 / 44)


def test_the_recommendation_rests_on_measurement_when_the_chosen_count_was_tried():
    trials = result(trial(0, 20.0, 21.0), trial(2, 40.8, 44.0), trial(4, 41.0, 45.1))
    predicted = predictions(21.0, 30.0, 44.0, 45.0, 45.1, 45.1)
    choice = _choose_with_trials(None, predicted, False, trials, False)
    # Best: 3 at 45 x (40.8/44 + 41/45.1) / 2 = 41.3 (predicted, scaled); 2 measured 40.8 is within 2 % of it
    # (CHOOSE_WITHIN), with fewer workers.
    assert (choice.num_workers, choice.rests_on, choice.compared_on) == (2, RESTS_ON_MEASURED, BASIS_IN_EPOCH)
    assert choice.best.num_workers == 3 and choice.best.steps_per_s == pytest.approx(45 * (40.8 / 44 + 41 / 45.1) / 2)
    assert choice.bound == "consumer"
    # Unscaled, the model's 10 % optimism would have won: 45 > 40.8 x 1.02.
    raw = dataclasses.replace(
        trials, settings=tuple(dataclasses.replace(r, predicted_steps_per_s=None) for r in trials.settings)
    )
    assert _choose_with_trials(None, predicted, False, raw, False).num_workers == 3


def test_a_count_measured_within_5_but_not_2_percent_of_the_best_is_not_chosen():
    # I/O-heavy loading, as its trials measured it from 0 and from 2: 5 workers at 41.25 and 41.06 steps/s, 6 workers
    # at 42.99 and 42.29 (96.0 % and 97.1 % of them). Without dlprof, 5 ran at 40.88 and 6 at 43.43 (94.1 %): trials
    # strayed by up to 2.6 %, in opposite directions at the two counts, so the fewest within 2 % count.
    predicted = predictions(6.9, 8.2, 16.4, 24.6, 32.7, 40.9, 43.8)
    for five, six in ((41.25, 42.99), (41.06, 42.29)):
        trials = result(trial(0, 6.9, 6.9), trial(5, five, 40.9), trial(6, six, 43.8))
        choice = _choose_with_trials(None, predicted, False, trials, False)
        assert (choice.num_workers, choice.rests_on, choice.best.num_workers) == (6, RESTS_ON_MEASURED, 6)
        assert 1 - WITHIN_BEST < five / six < 1 - CHOOSE_WITHIN


def test_the_recommendation_rests_on_the_model_between_and_beyond_the_counts_tried():
    trials = result(trial(0, 20.0, 21.0), trial(1, 28.0, 30.0))
    choice = _choose_with_trials(None, predictions(21.0, 30.0, 40.0, 44.0, 44.0), False, trials, False)
    # 28/30 at 1 scales 2, 3, 4: 37.3, 41.1, 41.1; 3 is the fewest within 2 % of the best.
    assert (choice.num_workers, choice.rests_on) == (3, RESTS_ON_PREDICTED)
    assert choice.chosen.steps_per_s == pytest.approx(44.0 * 28 / 30)


def test_nothing_measured_leaves_the_choice_to_the_predictions():
    trials = result(dataclasses.replace(trial(0, 20.0, 21.0), speed=None))
    assert _choose_with_trials(None, predictions(21.0, 30.0), False, trials, False) is None


def test_cpu_bound_loading_caps_predicted_counts_not_measured_ones():
    from dlprof.advice.model import ModelInputs

    inputs = ModelInputs(
        consumer_ms=10.0,
        batches_per_step=1.0,
        batch_ms=30.0,
        batch_cpu_ms=30.0,
        handoff_ms=0.0,
        usable_cores=2,
        main_cpu_ms=10.0,
        worker_pss_mib=None,
        available_ram_mib=None,
    )
    trials = result(trial(0, 20.0, 21.0), trial(4, 45.0, 45.0))
    choice = _choose_with_trials(inputs, predictions(21.0, 30.0, 40.0, 50.0, 45.0), True, trials, False)
    # 3 (predicted 50) is beyond the 2 usable cores; 4 was measured at 45 and may be recommended.
    assert (choice.num_workers, choice.rests_on) == (4, RESTS_ON_MEASURED)


def test_persistent_workers_follow_the_measured_comparison():
    def both(kept: float, restarted: float) -> TrialsResult:
        return result(
            trial(2, 40.0, None, False, restarted), trial(2, 40.0, None, True, kept), basis=BASIS_WHOLE_EPOCHS
        )

    keep, line = persistent_comparison(both(36.0, 30.0), 2, 1.0)
    assert keep is True and "36.00 steps/s with persistent workers, 30.00 with workers restarting" in line
    assert persistent_comparison(both(30.1, 30.0), 2, 1.0)[0] is None  # +0.3 %: as it is
    assert persistent_comparison(both(29.0, 30.0), 2, 1.0)[0] is False
    assert persistent_comparison(both(36.0, 30.0), 0, 1.0) is None  # no workers, nothing to keep
    inside = dataclasses.replace(both(36.0, 30.0), basis=BASIS_IN_EPOCH)
    assert persistent_comparison(inside, 2, 1.0) is None  # inside an epoch persistence makes no difference


def test_advice_on_the_hand_written_trace_with_trials():
    run = load_run(DATA_DIR / "tiny_trials_trace.json")
    advice = analyze_run(run).advice
    # Measured over whole 40-step epochs: two persistent workers are the fastest setting, and were tried.
    assert (advice.num_workers, advice.persistent_workers) == (2, True)
    assert (advice.rests_on, advice.compared_on) == (RESTS_ON_MEASURED, BASIS_WHOLE_EPOCHS)
    assert any(e.startswith("measured in this training (2 round(s)") for e in advice.evidence)
    assert any(e.endswith("the recommendation rests on measurement") for e in advice.evidence)
    assert any("persistent_workers=True keeps them" in e for e in advice.evidence)
    # Only 0 and 1 tried, without persistent workers: the model over-predicts 1 over whole epochs; its prediction for
    # 2, scaled by that error, is still more than 5 % above what 1 measured: 2 rests on the model.
    trials = run.manifest.trials
    kept = tuple(s for s in trials.segments if s.num_workers < 2 and not s.persistent_workers)
    fewer = dataclasses.replace(trials, counts=(0, 1), segments=kept, persistent=False)
    report = analyze_run(dataclasses.replace(run, manifest=dataclasses.replace(run.manifest, trials=fewer)))
    advice = report.advice
    one = next(r for r in report.trials.settings if r.num_workers == 1)
    scale = one.epoch_steps_per_s / one.predicted_steps_per_s
    two = advice.predicted[2].epoch_steps_per_s * scale
    assert 0.85 < scale < 0.95 and one.epoch_steps_per_s < two / 1.05
    assert (advice.num_workers, advice.rests_on) == (2, RESTS_ON_PREDICTED)
    line = next(e for e in advice.evidence if "was not tried" in e)
    assert f"the model predicts {two:.2f} steps/s over whole epochs (its prediction scaled by {scale:.2f}" in line
    assert line.endswith("measure it with dlprof record --try-workers 0,1,2")


def test_without_trials_nothing_changes():
    advice = analyze_run(load_run(DATA_DIR / "tiny_dlprof_trace.json")).advice
    assert (advice.num_workers, advice.rests_on, advice.compared_on) == (0, RESTS_ON_PREDICTED, BASIS_WHOLE_EPOCHS)
    assert not any("measured in this training" in e for e in advice.evidence)


def test_a_choice_resting_on_measurements_not_to_be_trusted_says_so():
    from dlprof.advice.measured import evidence

    shaky = dataclasses.replace(
        trial(2, 40.0, 44.0),
        speed=Throughput(steps_per_s=40.0, steps=100, seconds=2.5, spread_pct=30.0, transient_steps=0, trusted=False),
    )
    trials = result(trial(0, 20.0, 21.0), shaky)
    choice = _choose_with_trials(None, predictions(21.0, 30.0, 44.0), False, trials, False)
    assert (choice.num_workers, choice.rests_on) == (2, RESTS_ON_MEASURED)
    lines = evidence(trials, choice.chosen, choice.best, 0.05, (0, 2))
    assert lines[-1].startswith("caution: the measurement of num_workers=2 is not to be trusted")
    steady = result(trial(0, 20.0, 21.0), trial(2, 40.0, 44.0))
    choice = _choose_with_trials(None, predictions(21.0, 30.0, 44.0), False, steady, False)
    assert not any(line.startswith("caution") for line in evidence(steady, choice.chosen, choice.best, 0.05, (0, 2)))


def test_max_worker_memory_rules_out_the_settings_over_it_measured_or_predicted():
    from dlprof.advice.rules import WORKER_MEMORY_LIMIT, _choice, _ruled_out_line, over_memory_limit

    # 2 workers took 700 MiB together in their trial (350 each), 4 workers 1,500 (375 each): at most 1,000 MiB.
    two = dataclasses.replace(trial(2, 40.0, 40.0), workers_pss_mib=700.0)
    four = dataclasses.replace(trial(4, 48.0, 48.0), workers_pss_mib=1500.0, over_memory_limit=True)
    trials = dataclasses.replace(result(trial(0, 20.0, 20.0), two, four), max_worker_memory_mib=1000.0)
    predicted = predictions(20.0, 30.0, 40.0, 47.0, 48.0, 48.0)
    over = over_memory_limit(trials, None, [p.num_workers for p in predicted])
    # 3 and 5 were not tried: at the most a worker took in a trial (375 MiB), 3 x 375 and 5 x 375 are over too.
    assert over == {3: (1125.0, False), 4: (1500.0, True), 5: (1875.0, False)}
    choice = _choice(None, predicted, False, trials, False)
    assert (choice.num_workers, choice.rests_on, choice.bound) == (2, RESTS_ON_MEASURED, WORKER_MEMORY_LIMIT)
    assert _ruled_out_line(trials, over) == (
        "--max-worker-memory 1,000 MiB rules out num_workers=4 (1,500 MiB measured), num_workers=3, 5 (from 1,125"
        " MiB, predicted): their workers' memory together (PSS) is more"
    )
    # Without a limit, nothing is ruled out and the fastest measured count wins.
    unlimited = dataclasses.replace(trials, max_worker_memory_mib=None)
    assert over_memory_limit(unlimited, None, range(6)) == {}
    assert _choice(None, predicted, False, unlimited, False).num_workers == 4


def test_the_cost_of_tuning_against_what_the_chosen_setting_saves():
    from dlprof.advice.measured import Candidate, tuning_cost
    from dlprof.core.manifest import StepClock, TrialSegment
    from dlprof.results.trials import MeasuredSegment

    # 10 reference steps, then two segments of 50 steps of 20 ms: the trials took 2 s for 100 steps.
    clock = StepClock(phase=("trial",) * 110, wall_ms=(5.0,) * 10 + (20.0,) * 100)
    segments = tuple(
        MeasuredSegment(
            TrialSegment(num_workers=n, persistent_workers=False, round=0, first_step=first, steps=50), None
        )
        for n, first in ((0, 10), (2, 60))
    )
    own_tried = dataclasses.replace(result(trial(0, 60.0, None), trial(2, 80.0, None)), segments=segments)
    cost = tuning_cost(own_tried, Candidate(2, 80.0), clock, (0, False), None)
    # Your own setting (0 workers, tried: 60 steps/s) would take 100 / 60 s; 2 workers save 1000/60 - 1000/80 s per
    # 1,000 steps, making up the trials' extra 1/3 s after 80 steps.
    assert (cost.steps, cost.seconds, cost.num_workers, cost.own_steps_per_s) == (100, pytest.approx(2.0), 2, 60.0)
    assert cost.own_seconds == pytest.approx(100 / 60)
    assert cost.saved_s_per_1000 == pytest.approx(1000 / 60 - 1000 / 80)
    assert cost.payback_steps == pytest.approx(80.0)
    # Not tried at its own setting: the reference steps' speed (40 steps/s); the trials then took less: nothing to
    # make up.
    unprofiled = UnprofiledStats(
        reference_steps=50,
        step_ms=25.0,
        profiled_steps=20,
        step_ms_p50=25.0,
        profiled_step_ms=None,
        consumer_ms=20.0,
        wait_ms=5.0,
        cpu_ms=20.0,
        runq_ms=0.0,
        epoch=None,
    )
    cheap = tuning_cost(own_tried, Candidate(2, 80.0), clock, (1, False), unprofiled)
    assert (cheap.own_steps_per_s, cheap.own_seconds, cheap.payback_steps) == (40.0, 2.5, None)
    assert cheap.saved_s_per_1000 == pytest.approx(12.5)
    assert tuning_cost(result(trial(0, 60.0, None)), Candidate(0, 60.0), clock, (0, False), None) is None


def test_the_cost_of_tuning_with_the_training_gone_on_at_the_chosen_setting():
    from dlprof.advice.measured import Candidate, tuning_cost
    from dlprof.core.manifest import StepClock, TrialSegment
    from dlprof.results.trials import MeasuredSegment, TunedRun

    clock = StepClock(phase=("trial",) * 110, wall_ms=(5.0,) * 10 + (20.0,) * 100)
    segments = (
        MeasuredSegment(TrialSegment(num_workers=2, persistent_workers=False, round=0, first_step=10, steps=100), None),
    )
    tuned = TunedRun(
        mode="best",
        num_workers=2,
        persistent_workers=False,
        first_step=115,
        steps=1205,
        steps_at_setting=1200,
        speed=Throughput(steps_per_s=75.0, steps=1190, seconds=1190 / 75, spread_pct=1.0),
        trial_steps_per_s=80.0,
        change_pct=-6.25,
        held=False,
    )
    trials = dataclasses.replace(result(trial(0, 60.0, None), trial(2, 80.0, None)), segments=segments, tuned=tuned)
    cost = tuning_cost(trials, Candidate(2, 80.0), clock, (0, False), None)
    # The 1,200 steps after the switch at 75 steps/s (as measured there, not the trial's 80) against 60 at your own
    # setting: 1200 / 60 - 1200 / 75 = 4 s saved; the per-1,000-steps form stays as it was.
    assert (cost.tuned_steps, cost.tuned_saved_s) == (1200, pytest.approx(4.0))
    assert cost.saved_s_per_1000 == pytest.approx(1000 / 60 - 1000 / 80)
    # Gone on at your own setting (--then keep), or not measured there: nothing saved to tell.
    kept = dataclasses.replace(tuned, num_workers=0)
    assert (
        tuning_cost(dataclasses.replace(trials, tuned=kept), Candidate(2, 80.0), clock, (0, False), None).tuned_steps
        is None
    )
    unmeasured = dataclasses.replace(trials, tuned=dataclasses.replace(tuned, speed=None))
    assert tuning_cost(unmeasured, Candidate(2, 80.0), clock, (0, False), None).tuned_saved_s is None
