"""``capture.tuned.AfterTrials``: what the manifest's ``Trials.then`` says after the trials, switched or not, and why
not: the choice's own error, or the training ending before the choice (or the switch) was there."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dlprof.capture import tuned
from dlprof.capture.probe import switch
from dlprof.capture.trial_plan import write_json
from dlprof.results.record import THEN_BEST, THEN_KEEP

TRIALS_END = 40
LOADER_ID = 7


def _after(tmp_path, mode: str = THEN_BEST, step: list[int] | None = None):
    """The decider of a one-rank job whose training loader runs the script's own setting, without workers."""
    at = step if step is not None else [TRIALS_END]
    loader = SimpleNamespace(num_workers=0, prefetch_factor=None, persistent_workers=False, timeout=0)
    record = SimpleNamespace(loader=lambda: loader, loader_id=LOADER_ID)
    runner = SimpleNamespace(record=record, own=switch.Setting(0), step_in_progress=lambda: at[0])
    return tuned.AfterTrials(mode, tmp_path, True, 1, runner, TRIALS_END)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_pending_switch():
    yield
    switch.cancel(LOADER_ID)


def test_the_provisional_recording_at_the_trials_end_names_no_error(tmp_path):
    after = _after(tmp_path)
    after.at_boundary(TRIALS_END)
    then = after.then(TRIALS_END)
    assert (then.mode, then.trials_end_step, then.first_step, then.error) == (THEN_BEST, TRIALS_END, None, None)


def test_a_training_that_ends_before_the_choice_says_so(tmp_path):
    after = _after(tmp_path)
    for completed in range(TRIALS_END, TRIALS_END + 25):
        after.at_boundary(completed)  # no choice.json: the analysis is still running
    then = after.then(TRIALS_END + 25)
    assert then.first_step is None and then.num_workers is None
    assert then.error == (
        "the training ended 25 steps after the trials, before the setting chosen from their analysis was there (a"
        " longer training lets it switch)"
    )


def test_a_switch_asked_for_but_never_reached_names_its_setting(tmp_path):
    after = _after(tmp_path)
    write_json(tmp_path / tuned.CHOICE_FILE, tuned.choice_document(switch.Setting(2, 2, True)))
    after.at_boundary(TRIALS_END + 3)
    assert LOADER_ID in switch.PENDING  # asked for at the loader's next batch, which never came
    then = after.then(TRIALS_END + 4)
    assert then.first_step is None
    assert then.error == (
        "the training ended 4 steps after the trials, before its DataLoader gave a batch at num_workers=2"
    )


def test_the_switch_lands_at_the_step_its_first_batch_is_in(tmp_path):
    step = [TRIALS_END + 3]
    after = _after(tmp_path, step=step)
    write_json(tmp_path / tuned.CHOICE_FILE, tuned.choice_document(switch.Setting(2, 2, True)))
    after.at_boundary(TRIALS_END + 3)
    setting, done = switch.PENDING[LOADER_ID]
    step[0] = TRIALS_END + 5
    done(switch.SwitchReport(setting=setting))
    then = after.then(TRIALS_END + 30)
    assert (then.num_workers, then.prefetch_factor, then.persistent_workers) == (2, 2, True)
    assert (then.first_step, then.error) == (TRIALS_END + 5, None)


def test_the_same_setting_switches_at_once_without_restarting_workers(tmp_path):
    after = _after(tmp_path, mode=THEN_KEEP)  # the script's own setting, which the loader has now
    after.at_boundary(TRIALS_END)
    assert LOADER_ID not in switch.PENDING
    then = after.then(TRIALS_END + 10)
    assert (then.num_workers, then.first_step, then.error) == (0, TRIALS_END, None)


def test_the_choices_own_error_is_kept_over_the_end(tmp_path):
    after = _after(tmp_path)
    write_json(tmp_path / tuned.CHOICE_FILE, tuned.choice_document(None, "the trials' analysis recommends no setting"))
    after.at_boundary(TRIALS_END + 1)
    assert after.then(TRIALS_END + 50).error == "the trials' analysis recommends no setting"
