"""Planning the in-process trials, the plan every rank follows, and their options."""

from __future__ import annotations

import io
import json

import pytest

from dlprof.capture import trial_plan
from dlprof.capture.run_dir import write_session_config
from dlprof.capture.trial_plan import LoaderFacts, Plan, plan_trials
from dlprof.capture.trials import TrialProgress
from dlprof.core import throughput
from dlprof.core.errors import UsageError
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, TRIM_MIN_PCT
from dlprof.results.record import RecordRequest, TrialRequest


@pytest.mark.parametrize(("text", "counts"), [("0,1,2,4", (0, 1, 2, 4)), ("3", (3,)), (" 2, 0", (2, 0))])
def test_counts_are_parsed_in_the_order_given(text, counts):
    assert trial_plan.parse_counts(text) == counts


@pytest.mark.parametrize(
    ("text", "problem"),
    [("-1,x", "comma-separated whole numbers"), ("1,-2", "-2 is negative"), ("1,1", "given twice"), ("", "whole")],
)
def test_bad_counts_say_what_is_wrong(text, problem):
    with pytest.raises(UsageError, match=problem) as raised:
        trial_plan.parse_counts(text)
    assert str(raised.value).startswith(f"--try-workers {text!r}: ") and "\n" not in str(raised.value)


def test_options_that_cannot_go_with_the_trials():
    request = TrialRequest(counts=(0, 2))
    trial_plan.check_request(request, run_to_end=False)
    with pytest.raises(UsageError, match="--try-workers with --run-to-end"):
        trial_plan.check_request(request, run_to_end=True)
    with pytest.raises(UsageError, match="--try-workers with --steps 100: .*drop --steps"):
        trial_plan.check_request(request, run_to_end=False, workload_steps=100)
    with pytest.raises(UsageError, match="--trial-steps 0"):
        trial_plan.check_request(TrialRequest(counts=(0,), trial_steps=0), run_to_end=False)


def test_rounds_alternate_their_order():
    assert trial_plan.rounds_order((0, 1, 2, 4), False, 3) == [
        *[(0, n, False) for n in (0, 1, 2, 4)],
        *[(1, n, False) for n in (4, 2, 1, 0)],
        *[(2, n, False) for n in (0, 1, 2, 4)],
    ]
    # Persistent workers are tried beside each count with workers.
    assert trial_plan.settings_order((0, 2), True) == [(0, False), (2, False), (2, True)]
    assert trial_plan.rounds_order((0, 2), True, 2)[3:] == [(1, 2, True), (1, 2, False), (1, 0, False)]


def test_a_segment_is_its_refill_allowance_and_the_trial_steps():
    facts = LoaderFacts(num_workers=2, prefetch_factor=4, batches_per_step=2.0)
    plan = plan_trials(TrialRequest(counts=(0, 3), rounds=2, trial_steps=10), facts, 100, 0.05, (97, 0))
    # 3 workers keep 3 x 4 batches queued, 6 steps at 2 batches a step; the recorded 2 workers, 4 steps. A segment's
    # allowance is the settling steps and twice the surplus its switch leaves: the previous setting's queue, kept and
    # served first, and its own.
    previous_queue = [4, 0, 6, 6]  # from the recorded 2 workers, then from 0, 3, 3
    own_queue = {0: 0, 3: 6}
    assert [(s.round, s.num_workers, s.prefetch_factor) for s in plan.segments] == [
        (0, 0, None),
        (0, 3, 4),
        (1, 3, 4),
        (1, 0, None),
    ]
    assert [s.steps for s in plan.segments] == [
        2 * (kept + own_queue[s.num_workers]) + EPOCH_SETTLE_STEPS + 10
        for kept, s in zip(previous_queue, plan.segments)
    ]
    assert [s.steps - EPOCH_SETTLE_STEPS for s in plan.segments] == [18, 22, 34, 22]
    starts = [s.first_step for s in plan.segments]
    assert starts[0] == plan.trials_start == 100 and all(s.request_step == s.first_step for s in plan.segments)
    assert all(b == a.first_step + a.steps for a, b in zip(plan.segments, starts[1:]))
    assert plan.stop_step == plan.segments[-1].first_step + plan.segments[-1].steps
    assert (plan.decided_at, plan.decided_by, plan.trial_steps, plan.skipped) == (97, 0, 10, None)


def test_trial_steps_default_to_enough_steps_and_seconds():
    assert trial_plan.default_trial_steps(0.5) == throughput.MIN_STEPS  # 40 steps take 20 s
    assert trial_plan.default_trial_steps(0.01) == round(throughput.MIN_SECONDS / 0.01)  # 40 steps would take 0.4 s
    assert trial_plan.default_trial_steps(None) == trial_plan.FALLBACK_TRIAL_STEPS
    # Recorded at a slow, input-bound count (140 ms a step, 21 ms of it training): a setting that removes the wait
    # must still make 2 s over the 2 rounds, 1 s a segment: 48 steps, not 40 (0.84 s a segment).
    assert trial_plan.default_trial_steps(0.14, 0.021, rounds=2) == 48
    assert trial_plan.default_trial_steps(0.01, 0.01, rounds=2) == 200  # never fewer than at the measured step time
    facts = LoaderFacts(num_workers=0, prefetch_factor=None, batches_per_step=1.0)
    assert plan_trials(TrialRequest(counts=(0,)), facts, 10, 0.01, (10, 0)).trial_steps == 200
    two_rounds = TrialRequest(counts=(0, 2), rounds=2)
    assert plan_trials(two_rounds, facts, 10, 0.14, (10, 0), fastest_s=0.021).trial_steps == 48
    # Deciding by step counts alone (several machines): the clocks are not used.
    assert plan_trials(TrialRequest(counts=(0,)), facts, 10, 0.01, (10, 0), deterministic=True).trial_steps == 40


def test_no_trials_asked_or_none_possible():
    assert plan_trials(None, None, 50, 0.1, (47, 0)) == Plan(trials_start=50, stop_step=50, decided_at=47, decided_by=0)
    plan = plan_trials(TrialRequest(counts=(0, 2)), None, 50, 0.1, (50, 0))
    assert plan.stop_step == 50 and not plan.segments and "no DataLoader" in plan.skipped


def test_an_iterable_dataset_is_tried_a_whole_epoch_at_a_time():
    # Epochs of 20 steps; the last began at step 87. Segments of 5 + 10 steps take one epoch each.
    facts = LoaderFacts(
        num_workers=0, prefetch_factor=None, batches_per_step=1.0, iterable=True, epoch_steps=20, last_epoch_start=87
    )
    plan = plan_trials(TrialRequest(counts=(0, 1), trial_steps=10), facts, 100, 0.05, (100, 0))
    assert [s.first_step for s in plan.segments] == [107, 127, 147, 167] and plan.stop_step == 187
    assert all(s.at_epoch_start and s.steps == 20 for s in plan.segments)
    # The first switch is asked for at once, the others in the middle of the epoch before theirs.
    assert [s.request_step for s in plan.segments] == [100, 117, 137, 157]
    unknown = LoaderFacts(num_workers=0, prefetch_factor=None, batches_per_step=1.0, iterable=True)
    assert "no epoch ended" in plan_trials(TrialRequest(counts=(0, 1)), unknown, 100, 0.05, (100, 0)).skipped
    endless = LoaderFacts(
        num_workers=0, prefetch_factor=None, batches_per_step=1.0, iterable=True, epoch_steps=10**6, last_epoch_start=3
    )
    assert "epochs of 1000000 steps" in plan_trials(TrialRequest(counts=(0, 1)), endless, 100, 0.05, (100, 0)).skipped


def test_padded_batches_add_a_segment_of_trimmed_batches_at_the_last_setting():
    padded = LoaderFacts(num_workers=2, prefetch_factor=4, batches_per_step=2.0, trimmable_pct=TRIM_MIN_PCT)
    plan = plan_trials(TrialRequest(counts=(0, 3), rounds=2, trial_steps=10), padded, 100, 0.05, (97, 0))
    *tried, padding = plan.segments
    assert not any(s.trim_padding for s in tried) and padding.trim_padding
    last = tried[-1]
    assert (padding.num_workers, padding.persistent_workers, padding.prefetch_factor, padding.round) == (
        0,
        False,
        None,
        1,
    )
    # No switch: its allowance is its own (empty) queue's, the settling steps and the trial steps.
    assert padding.request_step == padding.first_step == last.first_step + last.steps
    assert padding.steps == EPOCH_SETTLE_STEPS + 10 and plan.stop_step == padding.first_step + padding.steps
    said = trial_plan.describe(TrialRequest(counts=(0, 3), rounds=2), plan, None)
    assert said.endswith("then one with batches trimmed to their longest sequence (they are padded past it)")
    # Below the threshold, no such segment.
    barely = LoaderFacts(num_workers=2, prefetch_factor=4, batches_per_step=2.0, trimmable_pct=TRIM_MIN_PCT - 0.1)
    plan = plan_trials(TrialRequest(counts=(0, 3), rounds=2, trial_steps=10), barely, 100, 0.05, (97, 0))
    assert len(plan.segments) == 4 and not any(s.trim_padding for s in plan.segments)


def test_an_iterable_datasets_padding_segment_is_as_long_as_its_other_segments():
    facts = LoaderFacts(
        num_workers=0,
        prefetch_factor=None,
        batches_per_step=1.0,
        iterable=True,
        epoch_steps=20,
        last_epoch_start=87,
        trimmable_pct=50.0,
    )
    plan = plan_trials(TrialRequest(counts=(0, 1), trial_steps=10), facts, 100, 0.05, (100, 0))
    padding = plan.segments[-1]
    assert padding.trim_padding and (padding.num_workers, padding.first_step, padding.steps) == (0, 187, 20)
    assert not padding.at_epoch_start and plan.stop_step == 207


def test_the_plan_is_published_whole_and_read_back(tmp_path):
    assert not trial_plan.plan_published(tmp_path) and trial_plan.read_plan(tmp_path) is None
    facts = LoaderFacts(num_workers=2, prefetch_factor=None, batches_per_step=1.0)
    plan = plan_trials(TrialRequest(counts=(0, 2), persistent=True, trial_steps=7), facts, 30, 0.02, (27, 0))
    trial_plan.write_plan(tmp_path, plan)
    assert trial_plan.plan_published(tmp_path) and trial_plan.read_plan(tmp_path) == plan
    assert [p.name for p in tmp_path.iterdir()] == [trial_plan.PLAN_FILE]  # no temporary file left


def test_the_request_travels_in_the_session_config(tmp_path):
    request = TrialRequest(counts=(4, 0), rounds=3, persistent=True, trial_steps=12)
    config = write_session_config(
        tmp_path,
        RecordRequest(
            command=("python", "t.py"), out_dir=tmp_path, name="r", wait=1, warmup=1, active=1, trials=request
        ),
    )
    assert trial_plan.request_from_config(json.loads(json.dumps(config))["trials"]) == request
    assert trial_plan.request_from_config(None) is None


def test_what_the_trials_will_cost_is_said_before_they_start():
    facts = LoaderFacts(num_workers=2, prefetch_factor=None, batches_per_step=1.0)
    request = TrialRequest(counts=(0, 1, 2, 4), trial_steps=40)
    plan = plan_trials(request, facts, 10, 0.1, (10, 0))
    # Queues of 0, 2, 4 and 8 steps; each segment 40 steps, 5 settling, twice its queue and the one before it's
    # (from the recorded 2 workers first): 53 + 49 + 57 + 69 + 77 + 69 + 57 + 49 = 480 steps of 0.1 s.
    steps = plan.stop_step - plan.trials_start
    assert [s.steps for s in plan.segments] == [53, 49, 57, 69, 77, 69, 57, 49]
    assert trial_plan.describe(request, plan, 0.1) == (
        "dlprof: trying num_workers 0,1,2,4 in 2 rounds of 4 segments, about 60 steps each: ~48 s"
    )
    assert steps == 480 and trial_plan.describe(request, plan, 0.5).endswith("~4 min")
    both = trial_plan.describe(TrialRequest(counts=(0, 2), rounds=1, persistent=True), plan, None)
    assert both.startswith("dlprof: trying num_workers 0,2 (and 2 with persistent workers) in 1 round of 3 segments")


def test_the_built_in_workload_gets_room_for_the_trials():
    request = TrialRequest(counts=(0, 2), trial_steps=10)
    # Two rounds of (2 x 4 + 5 + 10) and (2 x (4 + 4) + 5 + 10) steps (after the largest queue, 2 workers' 4 steps),
    # the padding segment should the batches be padded (2 x 4 + 5 + 10 at most), and the ranks' margin.
    assert trial_plan.steps_bound(request) == trial_plan.RANK_MARGIN_STEPS + 2 * (23 + 31) + 23
    assert trial_plan.steps_bound(TrialRequest(counts=(0,))) >= throughput.MIN_SECONDS / trial_plan.SHORTEST_STEP_S


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_line_per_segment_or_a_bar_on_a_terminal():
    facts = LoaderFacts(num_workers=0, prefetch_factor=None, batches_per_step=1.0)
    plan = plan_trials(TrialRequest(counts=(0, 2), rounds=1, trial_steps=5), facts, 10, 0.1, (10, 0))
    log = io.StringIO()
    progress = TrialProgress(plan, log)
    for step in range(10, plan.stop_step + 1):
        progress.update(step)
    progress.close()
    assert log.getvalue().splitlines() == [
        "dlprof: trial segment 1/2: num_workers 0 (round 1)",
        "dlprof: trial segment 2/2: num_workers 2 (round 1)",
    ]
    terminal = _Terminal()
    progress = TrialProgress(plan, terminal)
    for step in range(10, plan.stop_step + 1):
        progress.update(step)
    progress.close()
    drawn = terminal.getvalue()
    assert drawn.startswith("\rdlprof: trials [") and drawn.endswith("\n") and drawn.count("\n") == 1
    assert "segment 2/2, num_workers 2 (round 1)" in drawn
