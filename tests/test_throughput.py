"""dlprof.throughput on hand-made step series with exact expected numbers: how every speed is measured."""

from __future__ import annotations

import pytest

from dlprof import throughput
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
    a = Throughput(30.0, 60, 2.0, 1.0, transient_steps=4)
    b = Throughput(33.0, 66, 2.0, 2.0, transient_steps=5)
    both = throughput.combine([a, b])
    assert both.steps_per_s == pytest.approx(126 / 4.0) and (both.steps, both.seconds) == (126, 4.0)
    assert both.spread_pct == pytest.approx(100 * 3.0 / 31.5) and both.transient_steps == 9
    assert both.trusted
    assert throughput.combine([a]) is a
    assert throughput.combine([]) is None and throughput.combine([Throughput(0.0, 0, 0.0, 0.0)]) is None


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
