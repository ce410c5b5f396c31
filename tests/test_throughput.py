"""dlprof.core.throughput on hand-made step series with exact expected numbers: how every speed is measured."""

from __future__ import annotations

import pytest

from dlprof.core import throughput
from dlprof.results.analysis import Throughput

# A step that found its batch ready (the hand-off only) and one that waited for it: two workers of an I/O-bound
# loader deliver their batches close together, every 61 ms, against a 22 ms step (the pipeline).
READY, WAITED = (22.0, 0.5), (39.0, 17.5)


def series(*steps: tuple[float, float]) -> tuple[list[float], list[float]]:
    return [wall for wall, _ in steps], [wait for _, wait in steps]


def bursty(pairs: int, surplus: int = 0) -> tuple[list[float], list[float]]:
    """``surplus`` steps that find batches waiting (after an export pause), then ``pairs`` waited/ready pairs and one
    ready step more: the median step is 22 ms."""
    return series(*[READY] * surplus, *[WAITED, READY] * pairs, READY)


def test_queue_steps():
    assert throughput.queue_steps(2, 2) == 4
    assert throughput.queue_steps(2, None) == 2 * throughput.DEFAULT_PREFETCH_FACTOR
    assert throughput.queue_steps(4, 2, batches_per_step=3.0) == 3  # 8 batches, 3 a step: the 3rd step empties it
    assert throughput.queue_steps(0, 2) == throughput.queue_steps(None, None) == 0


def test_a_bursty_pipeline_is_steps_over_time_not_one_over_the_median():
    wall, wait = bursty(80)
    speed = throughput.measure(wall)
    # 81 steps of 22 ms and 80 of 39 ms: 161 steps in 4.902 s; 1000 / the median step (22 ms) would say 45.45.
    assert speed.steps_per_s == pytest.approx(161 / 4.902)
    assert (speed.steps, speed.seconds, speed.transient_steps) == (161, pytest.approx(4.902), 0)
    assert speed.steps_per_s < 0.75 * 1000 / 22.0
    # Sub-windows of 40 steps (20 pairs) and one of 41 (a ready step more): 40 / 1.22 s against 41 / 1.242 s.
    assert speed.spread_pct == pytest.approx(100 * (41 / 1.242 - 40 / 1.22) / (161 / 4.902))
    assert speed.trusted


def test_after_an_export_pause_the_surplus_is_left_out_until_the_first_step_that_waited():
    # The export left the queue full: 8 steps found their batches waiting (22 ms, no wait), twice the queue.
    wall, wait = bursty(80, surplus=8)
    queue = throughput.queue_steps(2, 2)
    assert throughput.transient_steps(wall, wait, queue) == 8
    speed = throughput.measure(wall, 8)
    assert speed.steps_per_s == pytest.approx(161 / 4.902) and speed.transient_steps == 8
    # Leaving out only the queue's worth would keep 4 surplus steps: 165 steps in 4.99 s, 0.7 % too fast.
    assert throughput.measure(wall, queue).steps_per_s == pytest.approx(165 / 4.99)


def test_the_transient_lasts_until_every_worker_has_waited():
    # What the I/O-bound loader really did after an export: 8 ready steps, then one that waited a little (one
    # worker's surplus used up) and one that found the other worker's batch still ready; then the alternation.
    wall, wait = series(*[READY] * 8, (30.0, 8.5), READY, *[WAITED, READY] * 80, READY)
    assert throughput.transient_steps(wall, wait, 4, workers=2) == 10
    assert throughput.measure(wall, 10).steps_per_s == pytest.approx(161 / 4.902)
    # Stopping at the first wait keeps the second worker's surplus.
    assert throughput.transient_steps(wall, wait, 4) == 8
    assert throughput.measure(wall, 8).steps_per_s == pytest.approx(163 / 4.954)


# A switch from 3 to 4 workers of an I/O-bound loader (30 ms of blocking read per sample, batch 4, a 22 ms step),
# as recorded: the first batch (417 ms: the old workers drained and shut down, the new ones forked), six kept batches
# served from memory (no wait at all), then the new queue's surplus, handed over in 0.7-2.0 ms, until the workers'
# rounds show: a wait of 22-23 ms and one of 7-9 ms every four steps (121 ms a round: 33 steps/s).
SWITCH_TO_4_WORKERS = [
    *[(417.4, 394.6), (22.4, 0.0), (22.1, 0.0), (22.0, 0.0), (22.5, 0.0), (22.5, 0.0), (22.5, 0.0)],
    *[(23.9, 1.6), (23.7, 1.3), (23.5, 1.2), (23.3, 1.1), (23.8, 1.8), (23.0, 0.9), (23.5, 0.8), (23.1, 1.0)],
    *[(22.9, 1.0), (22.9, 0.8), (23.0, 0.9), (23.2, 0.8), (23.5, 1.1), (23.3, 1.1), (23.3, 0.9), (23.4, 1.2)],
    *[(23.3, 1.2), (23.3, 1.1), (23.2, 1.0), (24.2, 1.9), (44.7, 22.5), (24.0, 2.0), (23.0, 0.9), (29.5, 7.4)],
    *[(44.8, 22.8), (24.0, 2.0), (22.5, 0.7), (30.6, 8.6), (45.1, 22.9), (24.1, 2.0), (23.0, 1.0), (28.9, 7.0)],
    *[(45.2, 23.3), (27.9, 1.8), (22.6, 0.7), (26.4, 4.4), (45.4, 23.3), (23.6, 1.7), (22.7, 0.6), (29.5, 7.6)],
    *[(45.5, 23.4), (24.4, 2.6), (22.7, 0.6), (29.5, 7.5), (46.0, 24.0), (23.6, 1.7), (22.6, 0.7), (29.3, 7.3)],
    *[(45.8, 23.6), (24.4, 2.6), (22.7, 0.7), (29.4, 7.3), (45.6, 23.5), (24.0, 2.1), (22.7, 0.7), (28.9, 6.9)],
    *[(46.3, 24.4), (23.9, 2.0), (22.8, 0.8), (29.4, 7.3)],
]


def test_the_hand_off_of_a_ready_batch_is_no_wait():
    wall, wait = series(*SWITCH_TO_4_WORKERS)
    # Hand-offs of 0.7-2.0 ms pass 4 % of the step (0.9 ms over the kept batches' 0.0): counted as waits, the four
    # came at steps 8-11, inside the surplus, and the segment was timed 7.7 % too fast.
    assert throughput.WAITED_SHARE * 23.3 < 1.0
    # The later half's mean wait is 8.1 ms: only waits over half of it count; the fourth is at step 34.
    assert throughput.transient_steps(wall, wait, 8, workers=4) == 34
    steady = throughput.measure(wall, 34)
    assert steady.steps == 33 and steady.steps_per_s == pytest.approx(33 / (sum(wall[34:]) / 1000))
    assert 32.5 < steady.steps_per_s < 33.5  # 4 batches every 121 ms
    # With the surplus: 56 steps in 1.59 s, 7 % too fast (as the trials were).
    assert throughput.measure(wall, 11).steps_per_s == pytest.approx(56 / 1.5899)
    assert throughput.measure(wall, 11).steps_per_s > 1.07 * steady.steps_per_s


def test_the_transient_is_at_least_the_queue():
    # The surplus lasted 2 steps only (a short pause): still a queue's worth is left out.
    wall, wait = bursty(80, surplus=2)
    assert throughput.transient_steps(wall, wait, 4) == 4


def test_a_consumer_bound_pipeline_that_never_waits_is_steady_after_the_queue():
    wall, wait = series(*[(30.0, 0.3)] * 200)
    assert throughput.transient_steps(wall, wait, 4) == 4
    speed = throughput.measure(wall, 4)
    assert (speed.steps, speed.steps_per_s, speed.spread_pct) == (196, pytest.approx(1000 / 30), pytest.approx(0.0))


def test_the_search_for_a_wait_is_bounded():
    # A wait that comes only after WAIT_SEARCH_QUEUES queues' worth of steps is no refill: steady after the queue.
    late = 4 + throughput.WAIT_SEARCH_QUEUES * 4
    wall, wait = series(*[(30.0, 0.3)] * late, (45.0, 15.3), *[(30.0, 0.3)] * 10)
    assert throughput.transient_steps(wall, wait, 4) == 4
    wall, wait = series(*[(30.0, 0.3)] * (late - 1), (45.0, 15.3), *[(30.0, 0.3)] * 10)
    assert throughput.transient_steps(wall, wait, 4) == late - 1


def test_without_workers_there_is_no_transient():
    wall, wait = series(*[(80.0, 60.0), (81.0, 61.0)] * 30)
    assert throughput.transient_steps(wall, wait, throughput.queue_steps(0, None)) == 0


def test_a_segment_shorter_than_its_transient_measures_nothing():
    wall, wait = bursty(1, surplus=3)  # 6 steps
    assert throughput.transient_steps(wall, wait, 8) == 6
    assert throughput.measure(wall, 6) is None
    assert throughput.measure([]) is None and throughput.measure([0.0, 0.0]) is None


def test_too_few_steps_or_seconds_or_too_wide_a_spread_is_not_trusted():
    short = throughput.measure([1.0] * throughput.MIN_STEPS * 4)  # enough steps, too few seconds
    assert short.steps == throughput.MIN_STEPS * 4 and not short.trusted
    few = throughput.measure([1000.0 * throughput.MIN_SECONDS] * (throughput.MIN_STEPS - 1))
    assert not few.trusted
    # Sub-windows of 40 ms and 60 ms steps: rates 25 and 16.7 steps/s around 20, a spread of 41.7 %.
    drifting = throughput.measure([40.0] * 100 + [60.0] * 100 + [40.0] * 100 + [60.0] * 100)
    assert drifting.steps_per_s == pytest.approx(20.0)
    assert drifting.spread_pct == pytest.approx(100 * (25 - 50 / 3) / 20) and not drifting.trusted


def test_combine_is_all_steps_over_all_time_and_the_range_of_the_parts():
    a = Throughput(steps_per_s=30.0, steps=60, seconds=2.0, spread_pct=1.0, transient_steps=4)
    b = Throughput(steps_per_s=33.0, steps=66, seconds=2.0, spread_pct=2.0, transient_steps=5)
    both = throughput.combine([a, b])
    assert both.steps_per_s == pytest.approx(126 / 4.0) and (both.steps, both.seconds) == (126, 4.0)
    assert both.spread_pct == pytest.approx(100 * 3.0 / 31.5) and both.transient_steps == 9
    assert both.trusted
    assert throughput.combine([a]) is a
    assert (
        throughput.combine([]) is None
        and throughput.combine([Throughput(steps_per_s=0.0, steps=0, seconds=0.0, spread_pct=0.0)]) is None
    )


def test_whole_rounds_of_the_workers_delivery():
    # 2 workers: steps come in rounds of 2 (one that waited, one that found its batch ready).
    wall, _ = bursty(80)  # 80 rounds and a lone ready step
    speed = throughput.measure(wall, period=2)
    assert (speed.steps, speed.steps_per_s, speed.spread_pct) == (160, pytest.approx(2000 / 61), pytest.approx(0.0))
    # 35 steps in parts of 8, 9, 9 and 9: the odd parts count one kind of step once too often.
    wall = [39.0, 22.0] * 17 + [39.0]
    assert throughput.measure(wall).spread_pct == pytest.approx(100 * (9 / 0.266 - 9 / 0.283) / (35 / 1.076))
    # In whole rounds: 34 steps in parts of 8, 8, 8 and 10, every one at the true rate.
    rounds = throughput.measure(wall, period=2)
    assert (rounds.steps, rounds.steps_per_s, rounds.spread_pct) == (34, pytest.approx(2000 / 61), pytest.approx(0.0))
    assert throughput.whole_periods(35, 2) == 34 and throughput.whole_periods(1, 2) == 1


def test_a_shrinking_queue_is_a_surplus_taken_out_of_the_rate():
    ready = [12, 10, 8, 7, 7, 6, 5, 5, 4, 3]
    assert throughput.surplus_steps(ready, 2, 9) == 5  # from 8 made to 3: 5 batches the workers made before
    assert throughput.surplus_steps(ready, 2, 9, batches_per_step=2.0) == 2.5
    assert throughput.surplus_steps([1, 2, 3], 0, 2) == 0  # the queue grew: training is the slower side
    assert throughput.surplus_steps([4, -1, 2], 0, 1) == throughput.surplus_steps([], 0, 5) == 0  # unknown
    speed = throughput.measure([25.0] * 40, surplus=4)
    assert (speed.steps, speed.surplus_steps) == (40, 4) and speed.steps_per_s == pytest.approx(36 / 1.0)
    # Parts combined: all their steps less all their surplus, over all their time.
    both = throughput.combine([speed, throughput.measure([25.0] * 40)])
    assert both.steps_per_s == pytest.approx(76 / 2.0) and both.surplus_steps == 4


def test_workers_a_little_slower_than_training_leave_a_surplus_that_is_measured():
    # 5 workers a little slower than training: after a switch, 17 batches are made, and the queue shrinks by one
    # every 5 steps (22 ms each, hand-offs of 0.3 ms) until it is empty at step 80; from step 90 every fifth step
    # waits 11 ms for its batch. The segment ends at step 100: not five waits.
    ready = [max(1, 17 - i // 5) for i in range(90)] + [0, 1, 1, 1, 1] * 2
    wall = [22.0] * 90 + [33.0, 22.0, 22.0, 22.0, 22.0] * 2
    wait = [0.3] * 90 + [11.3, 0.3, 0.3, 0.3, 0.3] * 2
    busy_at = throughput.all_busy_below(5, 2)
    assert busy_at == 5
    # Without the ready column: steady after the queue, the surplus timed.
    assert throughput.transient_steps(wall, wait, 10, workers=5) == 10
    # With it: from the first step at which every worker is busy again (5 made), the 4 batches of surplus still
    # there (5 at step 60, 1 at step 99) taken out of the count.
    first = throughput.transient_steps(wall, wait, 10, 5, ready, busy_at)
    assert first == 60 and ready[first] == 5
    surplus = throughput.surplus_steps(ready, first, len(ready) - 1)
    assert surplus == 4
    speed = throughput.measure(wall[first:], surplus=surplus)
    assert speed.steps_per_s == pytest.approx((40 - 4) / (sum(wall[60:]) / 1000))
    assert speed.steps_per_s < 0.95 * throughput.measure(wall[first:]).steps_per_s


def test_after_every_worker_waited_no_surplus_is_taken_out():
    # The switch to 4 workers above: the transient ends at the fourth wait, so the queue's ups and downs after it are
    # the workers' phase (taken out, they made the built-in workload's steady speed 2 % slow), not a surplus.
    # Three rounds more, so that the steps after the fourth wait (step 34) are enough to time (MIN_STEPS).
    wall, wait = series(*SWITCH_TO_4_WORKERS, *[(45.8, 23.6), (24.4, 2.6), (22.7, 0.7), (29.4, 7.3)] * 3)
    ready = [8] * 34 + [0, 3, 2, 1] * 11 + [3]
    busy_at = throughput.all_busy_below(4, 2)
    first = throughput.transient_steps(wall, wait, 8, 4, ready, busy_at)
    assert first == 34
    # Only a step that found no batch made waited: one a round, so the fourth (step 46) leaves too few steps to time,
    # and the transient ends where every worker is busy again, the same step. The queue's level over a round is
    # 1.5 at the start and 2.25 at the end: no surplus. One step's reading at each end (0, then 3) would be no
    # surplus either, but 3 then 0 would take the phase for 3 steps of surplus.
    assert throughput.transient(wall, wait, 8, 4, ready, busy_at).surplus_left
    assert throughput.surplus_steps(ready, first, len(ready) - 1, period=4) == 0
    assert throughput.surplus_steps([3, 2, 1, 0] * 3, 0, 11) == 3
    assert throughput.surplus_steps([3, 2, 1, 0] * 3, 0, 11, period=4) == 0
    # Workers a little slower than training (below): the waits do not come in time, and the surplus is measured.
    ready = [max(1, 17 - i // 5) for i in range(90)] + [0, 1, 1, 1, 1] * 2
    wall = [22.0] * 90 + [33.0, 22.0, 22.0, 22.0, 22.0] * 2
    wait = [0.3] * 90 + [11.3, 0.3, 0.3, 0.3, 0.3] * 2
    assert throughput.transient(wall, wait, 10, 5, ready, throughput.all_busy_below(5, 2)).surplus_left
    # Without the ready column there is nothing to measure.
    assert not throughput.transient(wall, wait, 10, 5).surplus_left


# A switch from 4 to 5 workers of the I/O-bound loader (30 ms of blocking read per sample, batch 4, a 23 ms step;
# the 5 workers make 40.9 steps/s without dlprof), as recorded with the step clock's batches made: the kept batches
# and a full queue (16) drain to 5 in 18 steps, then the queue shrinks by 2 more over 75 steps. Every step "waits"
# 0.8-1.9 ms with 3-5 batches made: the hand-off, never an empty queue.
IO_HEAVY_TO_5_WORKERS = {
    "wall": [
        389.1,
        22.6,
        22.2,
        22.5,
        22.2,
        23.0,
        22.5,
        22.4,
        22.5,
        22.5,
        22.5,
        22.6,
        22.4,
        26.2,
        23.2,
        22.8,
        23.9,
        23.8,
        24.2,
        22.8,
        23.7,
        23.6,
        23.5,
        23.3,
        23.5,
        23.5,
        23.6,
        23.7,
        23.3,
        23.8,
        23.4,
        23.5,
        23.7,
        23.5,
        23.5,
        23.6,
        23.5,
        23.5,
        23.6,
        23.3,
        23.2,
        23.5,
        23.4,
        24.1,
        23.6,
        23.4,
        23.6,
        23.4,
        23.6,
        23.7,
        23.5,
        23.5,
        23.4,
        23.7,
        24.2,
        24.1,
        23.5,
        23.4,
        23.2,
        23.3,
        23.5,
        23.4,
        23.7,
        23.7,
        23.4,
        23.8,
        23.6,
        23.3,
        23.6,
        23.5,
        26.2,
        23.8,
        23.6,
        23.1,
        23.5,
        23.7,
        23.7,
        23.2,
        23.8,
        23.7,
        23.0,
        24.0,
        24.0,
        23.7,
        23.6,
        23.6,
        22.9,
        22.9,
        23.1,
        23.7,
        23.0,
        23.2,
        23.2,
        23.2,
    ],
    "wait": [
        364.7,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        3.6,
        0.3,
        0.3,
        1.5,
        1.5,
        1.9,
        0.2,
        1.4,
        1.2,
        1.0,
        1.1,
        1.0,
        1.0,
        1.1,
        1.3,
        1.1,
        1.1,
        1.2,
        1.3,
        1.1,
        1.3,
        1.0,
        1.0,
        1.2,
        1.0,
        1.1,
        1.0,
        1.0,
        1.1,
        1.2,
        1.7,
        1.3,
        1.1,
        1.1,
        1.1,
        1.2,
        1.4,
        1.0,
        1.0,
        1.1,
        1.2,
        1.3,
        1.7,
        1.0,
        1.1,
        0.9,
        1.1,
        1.1,
        1.1,
        1.3,
        1.2,
        1.0,
        1.1,
        1.3,
        1.0,
        1.3,
        1.0,
        1.3,
        1.3,
        1.4,
        0.9,
        1.0,
        1.1,
        1.7,
        0.8,
        1.2,
        1.4,
        1.0,
        1.6,
        1.7,
        1.2,
        1.1,
        1.4,
        0.9,
        0.8,
        0.8,
        1.5,
        1.0,
        1.0,
        1.0,
        0.8,
    ],
    "ready": [
        16,
        16,
        15,
        14,
        13,
        13,
        16,
        15,
        14,
        13,
        12,
        12,
        11,
        10,
        9,
        8,
        7,
        6,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        4,
        5,
        5,
        4,
        5,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        3,
        4,
        4,
        4,
        4,
        3,
        3,
        4,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
        3,
    ],
}


def test_a_step_that_found_batches_made_did_not_wait():
    wall, wait, ready = IO_HEAVY_TO_5_WORKERS["wall"], IO_HEAVY_TO_5_WORKERS["wait"], IO_HEAVY_TO_5_WORKERS["ready"]
    busy_at = throughput.all_busy_below(5, 2)
    # Without the batches made, the hand-offs pass for the five workers' waits by step 20 (the threshold is 4 % of
    # the step, 0.9 ms), the surplus is timed: 42.46 steps/s, 4 % over the 40.9 the workers make.
    assert throughput.transient_steps(wall, wait, 10, workers=5) == 20
    assert throughput.measure(wall[20:]).steps_per_s == pytest.approx(74 / (sum(wall[20:]) / 1000))
    # With them, no step waited: the transient ends at the first step with every worker busy (5 made, step 18), and
    # the queue's shrink over the timed steps, 2 batches by its level over a round (5 at the start, 3 at the end),
    # comes out of the count.
    first = throughput.transient_steps(wall, wait, 10, 5, ready, busy_at)
    assert first == 18 and throughput.transient(wall, wait, 10, 5, ready, busy_at).surplus_left
    surplus = throughput.surplus_steps(ready, first, len(ready) - 1, period=5)
    assert surplus == 2
    speed = throughput.measure(wall[first:], surplus=surplus)
    assert speed.steps_per_s == pytest.approx(74 / (sum(wall[first:]) / 1000))
    assert 40.9 * 0.98 < speed.steps_per_s < 40.9 * 1.02


def test_a_full_queue_is_no_surplus():
    # Training the slower side (io-loading at 6 workers): after a switch the kept batches and a full queue make 20,
    # and the queue settles at its 12; it never falls to every worker busy (6), so the workers idle on it, and the
    # 8 batches kept from before do not make training faster: nothing is taken out.
    ready = [20 - i // 2 for i in range(16)] + [12] * 84
    wall, wait = [10.0] * 100, [0.5] * 100
    busy_at = throughput.all_busy_below(6, 2)
    assert throughput.transient_steps(wall, wait, 12, 6, ready, busy_at) == 12
    assert not throughput.transient(wall, wait, 12, 6, ready, busy_at).surplus_left
    assert throughput.surplus_steps(ready, 12, 99, period=6) > 0  # what was taken out before


def test_a_dip_of_a_full_queue_is_no_end_of_a_surplus():
    # The built-in workload at 2 workers, training the slower side: 3-4 batches made at every step, one dip to 2 (every
    # worker busy) near the end. No step found none made, so no step waited; the queue is no surplus draining, and
    # the segment is steady after the queue (it had been timed from the dip: 4 steps of 108).
    ready = [4, 3] * 52 + [2, 3, 4, 3]
    wall, wait = [60.0] * 108, [0.4] * 108
    busy_at = throughput.all_busy_below(2, 2)
    assert throughput.transient_steps(wall, wait, 4, 2, ready, busy_at) == 4
    assert not throughput.transient(wall, wait, 4, 2, ready, busy_at).surplus_left
