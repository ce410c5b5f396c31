"""Speeds scaled to the run's mean batch where batch widths vary and the steps follow them, from hand-written step
clocks and batch facts: every expected number worked out by hand."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from analysis.test_trials import KEPT, Plan, clock
from analysis.test_tuned import manifest as tuned_manifest
from dlprof.analysis import batch_widths
from dlprof.analysis.trials import trials_result
from dlprof.core import throughput
from dlprof.core.manifest import BatchFacts, Manifest, Then
from dlprof.results.analysis import Throughput

#: A step's ms per token position in the trials below: its time is its batch's positions x this.
SLOPE = 0.05


def facts(positions: list[int], loader: int = 0, order: list[int] | None = None) -> BatchFacts:
    """One batch of one row per entry, ``positions[i]`` wide, batch ``i`` of epoch 0; listed in ``order`` (the order
    they were made, which with workers is not the order they are taken)."""
    order = order if order is not None else list(range(len(positions)))
    count = len(positions)
    return BatchFacts(
        loader=(loader,) * count,
        epoch=(0,) * count,
        batch=tuple(order),
        worker=(-1,) * count,
        made_ns=tuple(range(count)),
        rows=(1,) * count,
        width=tuple(positions[i] for i in order),
        real_tokens=tuple(positions[i] for i in order),
        longest=tuple(positions[i] for i in order),
        nbytes=(8,) * count,
        fingerprint=("",) * count,
    )


def narrow_then_wide() -> tuple[Manifest, list[int]]:
    """Two rounds of num_workers=0: round 0 on batches of 300 and 500 positions in turn (15 and 25 ms steps), round 1
    (nothing kept from round 0, which had no workers) on 700 and 900 (35 and 45 ms); the reference steps and the 4
    batches kept from the script's own workers 600 wide, so the mean batch is 600 positions: 30 ms."""
    plan = Plan()
    narrow = [(SLOPE * p, 0.1) for p in (300, 500)] * 24
    wide = [(SLOPE * p, 0.1) for p in (700, 900)] * 24
    plan.add(0, False, 0, KEPT + narrow)
    plan.add(0, False, 1, wide)
    positions = [600] * 14 + [300, 500] * 24 + [700, 900] * 24
    manifest = replace(plan.manifest(counts=(0,), persistent=False), batches=facts(positions))
    return manifest, positions


def test_the_rounds_of_one_setting_on_narrow_and_wide_batches_read_alike():
    manifest, _ = narrow_then_wide()
    result = trials_result(manifest, 1.0)
    zero = result.settings[0]
    # Scaled, every steady step takes what a 600-position batch takes: 30 ms; each round alone read 50 and 25
    # steps/s, 67 % apart, and now both read 33.3 with no spread.
    assert zero.speed.steps_per_s == pytest.approx(1000 / 30)
    assert zero.speed.spread_pct == pytest.approx(0.0) and zero.speed.trusted
    rounds = [m.speed for m in result.segments]
    assert [s.steps_per_s for s in rounds] == [pytest.approx(1000 / 30)] * 2
    # Round 0 measured 50 steps/s (20 ms a step): scaled, 33 % slower; round 1, 25 steps/s, 33 % faster.
    assert [s.width_scaled_pct for s in rounds] == [pytest.approx(-100 / 3), pytest.approx(100 / 3)]
    # Both rounds together: 96 steps in 2.88 s measured, 2.88 s scaled: unmoved.
    assert zero.speed.width_scaled_pct == pytest.approx(0.0)
    scaling = result.width_scaling
    assert scaling.ms_per_position == pytest.approx(SLOPE) and scaling.correlation == pytest.approx(1.0)
    assert (scaling.mean_positions, scaling.steps, scaling.lag_steps) == (600, 96, 0)
    assert (scaling.low_pct, scaling.high_pct) == (pytest.approx(0.0), pytest.approx(0.0))
    assert result.notes[-1] == (
        "batch widths vary and the steps follow them (correlation 1.00 over 96 steps, 50.0 ms per 1,000 token"
        " positions): every speed is scaled to the run's mean batch of 600 positions, which moved the trials'"
        " speeds by +0.0 %"
    )


def test_a_loader_read_one_ahead_is_fitted_one_step_late():
    manifest, positions = narrow_then_wide()
    # The same steps, but each batch taken one step before it is computed on (accelerate's DataLoaderShard): the
    # batches are listed one step early.
    ahead = replace(manifest, batches=facts([*positions[1:], 600]))
    result = trials_result(ahead, 1.0)
    assert result.width_scaling.lag_steps == 1 and result.width_scaling.correlation == pytest.approx(1.0)
    assert [m.speed.steps_per_s for m in result.segments] == [pytest.approx(1000 / 30)] * 2
    assert "each step computes on the batch taken the step before" in result.notes[-1]


def test_the_batches_are_taken_in_the_order_of_the_epoch_not_the_order_made():
    manifest, positions = narrow_then_wide()
    # Made out of order (workers finish in any order): listed by when they were made, taken by their index.
    order = list(range(len(positions)))
    order[20], order[21] = order[21], order[20]
    widths = batch_widths.step_widths(replace(manifest, batches=facts(positions, order=order)), 0)
    assert widths is not None and list(widths.positions) == positions and widths.mean_positions == 600


def test_steps_taking_several_batches_or_none_sum_theirs():
    manifest, positions = narrow_then_wide()
    counts = [1] * len(positions)
    counts[2], counts[3] = 2, 0  # a step took two batches, the next none
    two = replace(manifest, step_clock=replace(manifest.step_clock, batches=tuple(counts)))
    widths = batch_widths.step_widths(two, 0)
    assert widths.positions[1:5] == (600, 1200, 0, 600) and widths.batches[1:5] == (1, 2, 0, 1)


@pytest.mark.parametrize(
    "change",
    [
        "one width",
        "another loader",
        "fewer made than taken",
        "far more made than taken",
        "an unmeasured batch",
        "no token tensor",
        "times not following",
    ],
)
def test_speeds_are_left_as_measured_where_the_widths_cannot_scale_them(change):
    manifest, positions = narrow_then_wide()
    batches, steps = manifest.batches, manifest.step_clock
    if change == "one width":
        batches = facts([600] * len(positions))
    elif change == "another loader":
        batches = facts(positions, loader=7)
    elif change == "fewer made than taken":
        batches = facts(positions[:-1])
    elif change == "far more made than taken":
        batches = facts(positions + [600] * (batch_widths.MAX_UNTAKEN + 6))
    elif change == "an unmeasured batch":
        batches = replace(batches, unmeasured=1)
    elif change == "no token tensor":
        batches = replace(batches, rows=(0,) + batches.rows[1:])
    else:  # the steps alternate 15 and 25 ms, or 35 and 45, whatever their batches
        batches = facts([600 + (100 if i % 4 < 2 else -100) for i in range(len(positions))])
    result = trials_result(replace(manifest, batches=batches, step_clock=steps), 1.0)
    assert result.width_scaling is None
    assert all(m.speed.width_scaled_pct is None for m in result.segments)
    # As measured: 48 steps in 0.96 s, and in 1.92 s.
    assert [m.speed.steps_per_s for m in result.segments] == [pytest.approx(50.0), pytest.approx(25.0)]
    assert not any(note.startswith("batch widths vary") for note in result.notes)


def test_a_few_batches_left_in_the_queue_at_the_end_are_not_taken():
    manifest, positions = narrow_then_wide()
    queued = replace(manifest, batches=facts(positions + [5000] * 4))
    assert trials_result(queued, 1.0).width_scaling.mean_positions == 600


def test_combined_parts_keep_how_much_the_scaling_moved_them():
    # Two parts: 40 steps in 2 s scaled from 1.6 s (-20 %), 40 steps in 2 s scaled from 2.4 s (+20 %); together 80
    # steps in 4 s scaled from 4 s.
    part = Throughput(steps_per_s=20.0, steps=40, seconds=2.0, spread_pct=0.0)
    slower, faster = replace(part, width_scaled_pct=-20.0), replace(part, width_scaled_pct=20.0)
    assert throughput.combine([slower, faster]).width_scaled_pct == pytest.approx(0.0)
    assert throughput.combine([slower, slower]).width_scaled_pct == pytest.approx(-20.0)
    assert throughput.combine([slower, part]).width_scaled_pct is None


def test_a_steady_step_is_moved_to_as_many_mean_batches():
    manifest, _ = narrow_then_wide()
    widths = batch_widths.StepWidths(positions=(300, 1200, 0), batches=(1, 2, 0), mean_positions=600.0)
    scaling = replace(batch_widths.fit(manifest.step_clock, *_fitted(manifest)), lag_steps=0)
    scaler = batch_widths.Scaler(widths, scaling)
    walls = clock([(15.0, 0.1), (60.0, 0.1), (5.0, 0.1)])
    # 15 + 0.05 x (600 - 300); 60 + 0.05 x (1200 - 1200); a step that took no batch is left as it was.
    assert scaler.wall_ms(walls, [0, 1, 2]) == [pytest.approx(30.0), pytest.approx(60.0), pytest.approx(5.0)]


def _fitted(manifest: Manifest) -> tuple[batch_widths.StepWidths, list[list[int]]]:
    widths = batch_widths.step_widths(manifest, 0)
    assert widths is not None
    # The two rounds' steady steps: after the reference steps and the first segment's 4 kept batches.
    return widths, [list(range(14, 62)), list(range(62, 110))]


def test_a_wider_batch_that_is_not_slower_is_not_fitted():
    # Widths in no repeating order (no lag fits them by chance): steps faster by 0.05 ms per position, then slower.
    positions = [400 + (i * 37) % 400 for i in range(60)]
    widths = batch_widths.StepWidths(tuple(positions), (1,) * 60, statistics.fmean(positions))
    pieces = [list(range(60))]
    faster = clock([(60.0 - SLOPE * p, 0.1) for p in positions])
    assert batch_widths.fit(faster, widths, pieces) is None
    slower = batch_widths.fit(clock([(SLOPE * p, 0.1) for p in positions]), widths, pieces)
    assert (slower.ms_per_position, slower.lag_steps) == (pytest.approx(SLOPE), 0)
    # Too few steps to tell.
    assert batch_widths.fit(clock([(SLOPE * p, 0.1) for p in positions]), widths, [list(range(29))]) is None


def test_the_speed_after_the_switch_is_scaled_as_its_trial_is():
    """--then keep from num_workers=4 back to 0: the 0-worker trial on batches of 600 and 1000 positions in turn (30
    and 50 ms), the training after it on 1000 and 1400 (50 and 70 ms): measured, 33 % below its trial; at the run's
    mean batch, the same speed."""
    then = Then(mode="keep", trials_end_step=270, num_workers=0, persistent_workers=False, first_step=270)
    manifest = tuned_manifest([(40.0, 20.0)] * 100, then, last_workers=4)
    positions = [800] * 10 + [600, 1000] * 30 + [800] * 200 + [1000, 1400] * 50
    walls = list(manifest.step_clock.wall_ms)
    for i in [*range(10, 70), *range(270, 370)]:
        walls[i] = SLOPE * positions[i]
    manifest = replace(
        manifest, step_clock=replace(manifest.step_clock, wall_ms=tuple(walls)), batches=facts(positions)
    )
    tuned = trials_result(manifest, 1.0).tuned
    mean_step_ms = SLOPE * statistics.fmean(positions)
    assert tuned.speed.steps_per_s == pytest.approx(1000 / mean_step_ms)
    assert tuned.trial_steps_per_s == pytest.approx(1000 / mean_step_ms)
    assert tuned.change_pct == pytest.approx(0.0) and tuned.held is True
    # Measured, the 92 steady steps after the switch averaged 60 ms: scaled to the mean batch, faster.
    assert tuned.speed.width_scaled_pct == pytest.approx(100 * (60 / mean_step_ms - 1))
    # Its CPU time per step (1 ms a hand-written step) at the mean batch: as much less as its wall time.
    assert tuned.cpu_levels.cpu_ms == pytest.approx(mean_step_ms / 60)
    unscaled = trials_result(replace(manifest, batches=BatchFacts()), 1.0).tuned
    assert unscaled.change_pct == pytest.approx(100 * (40 / 60 - 1)) and unscaled.held is False
