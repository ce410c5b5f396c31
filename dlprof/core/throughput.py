"""Speeds that tell the truth: steady-state steps over the time they took, with their spread.

Every place dlprof times training steps (the reference steps after the profiler's window, whole epochs,
``dlprof sweep`` and the in-process trials) measures through this module, with the same three rules:

* **Steady state only.** After a pause of the main process (the profiler's export, a switch of the
  DataLoader's worker count, an epoch start), the DataLoader's prefetch queue is out of balance: the
  workers went on producing while training stood still and the queue filled (``num_workers ×
  prefetch_factor`` batches), or a new iterator starts from nothing. The first steps after such a pause
  find batches waiting, or wait for all of them at once. :func:`transient_steps` says how many to leave
  out: at least a queue's worth, and until every worker's surplus is used up (as many steps have waited
  as there are workers: batches come from the workers in turn, and a wait tells of one worker's queue
  only), within a bound.
* **Steps over time.** A rate is the number of steps over the time they took, never 1000 / median step:
  with a few workers steps alternate (one waits, the next finds its batch ready), and the median of such
  steps is no throughput.
* **Enough of it, and its spread.** At least :data:`MIN_STEPS` steps and :data:`MIN_SECONDS` seconds; the
  steps are cut into :data:`SUB_WINDOWS` parts whose rates give the spread, and a spread over
  :data:`MAX_SPREAD_PCT` is flagged as too wide to trust.

Standard library and :mod:`dlprof.results` only: the recorder (in the training process) and the analysis
(torch-free) both use it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple

from dlprof.results.analysis import Throughput

# How long a speed must be timed, from the variation of training measured without dlprof
# (scripts/measure_variation.py: 40-90 s of steady steps per run on 2 shared cores, the workers' delivery in
# whole rounds). p90 of |rate of a window / the run's long-run rate - 1|, %, for windows of at least n steps or
# t seconds, and of both 40 steps and 2 s:
#
#   workload (synthetic: scripts/bench_workload.py)    n=10  n=20  n=40  n=80 n=160   t=1s  t=2s  t=4s   40+2s
#   io-bound, 15 ms read/sample, 20 ms step, 2 workers  1.4   1.2   0.8   0.7   0.5    0.9   0.7   0.5     0.7
#   io-bound, 4 workers (bound by the consumer)         2.6   2.3   2.3   1.6   1.2    2.3   1.9   1.3     1.9
#   io-bound, no workers                                0.8   1.2   0.9   0.5   0.5    0.8   1.1   0.7     0.9
#   io-heavy, 30 ms read/sample, 2 workers              0.7   0.5   0.3   0.3   0.3    0.5   0.4   0.3     0.3
#   cpu-bound, 8 ms CPU/sample, 2 workers               6.7   4.2   2.6   2.3   1.6    2.6   2.0   1.1     2.0
#   built-in LoRA (batches of varying length), 2 wkrs  28.7  16.8  10.5   9.4   4.6   18.8  13.1  10.6    10.5
#   built-in LoRA, no workers                          31.4  20.4  13.2  10.0   8.5   22.1  12.5  12.5    13.2
#
# With steps of one cost, 40 steps and 2 s keep every window within 2 % (3 % is the aim); fewer steps leave too
# few per sub-window for the spread. With batches of varying length no window short of whole epochs gets
# there (its steps' mean is 1.3-1.4 x their median): the spread says so (of 64 such measurements of the LoRA
# workload, 2 were trusted), and short epochs are timed whole (dlprof.core.manifest.whole_epochs_to_time).

#: Fewest steps a speed is measured over: four sub-windows of 10 steps each, so that a pattern of steps
#: that alternate (two or three workers delivering in turn) averages out inside every sub-window.
MIN_STEPS = 40
#: Shortest time a speed is measured over, seconds: long enough that one slow step (a garbage collection,
#: another process taking a core) moves the rate by a few per cent at most.
MIN_SECONDS = 2.0
#: Parts the timed steps are cut into for the spread.
SUB_WINDOWS = 4
#: A spread wider than this (range of the parts' rates, % of the rate) makes the number untrustworthy. Four
#: parts' range is about 2 standard deviations of one part, 4 of the whole: 10 % keeps the whole within ~4 % at
#: p90. Measured as above: every measurement of the synthetic workloads was trusted (p90 error 0.1-2.0 %).
MAX_SPREAD_PCT = 10.0
#: A step waited for its batch when its wait exceeds the segment's smallest wait (the hand-off of a ready
#: batch) by this share of its median step: below it, what a surplus of batches saves is that small too (a
#: pipeline whose steady waits stay under it runs within about this share of its consumer's own speed, so a
#: surplus left unseen biases the rate by less).
WAITED_SHARE = 0.04
#: ... and by this share of the mean wait of the segment's later half (its steady state). The hand-off of a ready
#: batch varies by itself: 0.0-2.2 ms on this machine (io-heavy trials at 4 workers, a 23 ms step), enough to pass
#: for a wait at 4 % of the step, so that four "waits" came within a queue's surplus and it was timed (+7.7 %). In
#: a pipeline bound by its workers, the real waits carry each round's whole shortfall: there the steady mean wait
#: was 8 ms, its real waits 7-30 ms, its hand-offs at most 2.2 ms.
STEADY_WAIT_SHARE = 0.5
#: After the queue's worth of steps, look this many queues' worth further for the steps that waited; a
#: pipeline that has not waited once per worker by then is bound by its consumer (the queue stays full: steady
#: already). A surplus of a queue lasts ``queue / gap`` steps when the producers are slower than the consumer
#: by a share ``gap``: 25 queues find it down to a 4 % gap, the bound :data:`WAITED_SHARE` sets (below it the
#: surplus biases the rate by less than 4 %). Measured (scripts/measure_variation.py, 1 s pauses): loaders
#: bound by their workers waited once per worker within 13 steps of a pause at 2 workers; at 4 workers, bound
#: by the consumer, the hand-off's jitter (1-1.5 ms against a 23 ms step) made 4 "waits" after 37-72 steps on
#: average: steps wasted, not a bias (the queue there stays full anyway).
WAIT_SEARCH_QUEUES = 25
#: PyTorch's prefetch_factor when the DataLoader got none.
DEFAULT_PREFETCH_FACTOR = 2


def queue_steps(num_workers: int | None, prefetch_factor: int | None, batches_per_step: float = 1.0) -> int:
    """Steps that consume a full prefetch queue: ``num_workers × prefetch_factor`` batches (0 without workers)."""
    if not num_workers:
        return 0
    batches = num_workers * (prefetch_factor or DEFAULT_PREFETCH_FACTOR)
    return math.ceil(batches / max(1.0, batches_per_step))


def all_busy_below(num_workers: int | None, prefetch_factor: int | None) -> int:
    """At most this many batches ready, every worker has one in progress (each holds ``prefetch_factor`` tasks, and
    the DataLoader hands them out in turn): ``num_workers × (prefetch_factor - 1)``."""
    return (num_workers or 0) * ((prefetch_factor or DEFAULT_PREFETCH_FACTOR) - 1)


class Transient(NamedTuple):
    """A segment's refill transient (:func:`transient`)."""

    #: Steps at the start of the segment left out (:func:`transient_steps`).
    steps: int
    #: Whether the transient ended where every worker is busy again rather than after a wait per worker: only then
    #: may a surplus still be there, to be measured (:func:`surplus_steps`). After the waits it is gone, and the
    #: queue's ups and downs between two steps are the workers' phase, not a surplus (taken out, they made the built-in
    #: workload's steady speed 2 % slow). Nor where the queue never fell to every worker busy: training is the slower
    #: side, the workers idle on a full queue, and what training takes from it is no faster for the batches kept from
    #: before (taken out, they made io-loading's trials at 5-6 workers 5-7 % slow).
    surplus_left: bool


def transient(
    wall_ms: Sequence[float],
    wait_ms: Sequence[float],
    queue: int,
    workers: int = 1,
    ready: Sequence[int] = (),
    busy_at: int | None = None,
) -> Transient:
    """:func:`transient_steps` and whether a surplus may be left after them (:attr:`Transient.surplus_left`), from one
    search for the waits."""
    count = len(wall_ms)
    start, found = _waits(wall_ms, wait_ms, queue, workers, ready, busy_at)
    if start >= count or queue == 0:
        return Transient(start, False)
    if _draining(ready, busy_at, start, count) and (found is None or count - found < MIN_STEPS):
        return Transient(next((i for i in range(start, count) if ready[i] <= busy_at), start), True)
    return Transient(start if found is None else found, False)


def transient_steps(
    wall_ms: Sequence[float],
    wait_ms: Sequence[float],
    queue: int,
    workers: int = 1,
    ready: Sequence[int] = (),
    busy_at: int | None = None,
) -> int:
    """How many steps at the start of a segment (the steps after one pause, in order) are its refill transient.

    At least ``queue`` steps (:func:`queue_steps`), then up to the step after which ``workers`` steps have
    waited for their batch (:data:`WAITED_SHARE`, :data:`STEADY_WAIT_SHARE`): the DataLoader takes batches from
    its workers in turn, so one wait tells that one worker's surplus is used up, and after one per worker the
    surplus the pause left in the queue is gone (on an I/O-bound loader at 2 workers, stopping at the first
    wait kept a surplus worth +1.8 % over the next 40 steps; at the second, +0.8 %: scripts/measure_variation.py).

    When fewer steps wait within :data:`WAIT_SEARCH_QUEUES` queues' worth of steps, the queue never empties (the
    consumer is the slower side) and the segment is steady after ``queue`` steps. With ``ready`` (the step clock's
    batches already made at each step, :func:`surplus_steps`) and ``busy_at`` (:func:`all_busy_below`), when the
    waits do not come, or leave fewer than :data:`MIN_STEPS` steps, the transient ends at the first step from
    ``queue`` on at which every worker is busy again: the surplus left there is measured and taken out of the rate
    instead. Workers a little slower than training leave a pause's surplus for the whole segment (5 workers at 41
    steps/s against a 45 steps/s step: their waits came 80 steps after the switch).
    """
    return transient(wall_ms, wait_ms, queue, workers, ready, busy_at).steps


def _readable(ready: Sequence[int], busy_at: int | None, start: int, count: int) -> bool:
    return busy_at is not None and len(ready) == count and all(r >= 0 for r in ready[start:])


def _draining(ready: Sequence[int], busy_at: int | None, start: int, count: int) -> bool:
    """Whether the workers are the slower side: over the later half of the segment the queue of made batches stays
    at or below every worker busy (its median). Where it stays above, training is the slower side, the workers idle
    on a full queue, and a dip to ``busy_at`` is the queue's jitter, not the end of a surplus (the built-in workload
    at 2 workers, 3-4 made: a dip to 2 at step 104 of 108 left 4 steps to time)."""
    if not _readable(ready, busy_at, start, count):
        return False
    return statistics.median(ready[max(start, count // 2) : count]) <= busy_at


def _waits(
    wall_ms: Sequence[float],
    wait_ms: Sequence[float],
    queue: int,
    workers: int,
    ready: Sequence[int] = (),
    busy_at: int | None = None,
) -> tuple[int, int | None]:
    """The transient's least end (a queue's worth of steps), and the step of the wait of the last worker after it
    within the search (None: fewer waited). Where the step clock says how many batches were made at each step
    (``ready``), a step waited only when none was (:func:`_last_of_waits`)."""
    count = len(wall_ms)
    start = min(queue, count)
    if queue == 0 or start >= count:
        return start, None
    margin_ms = max(WAITED_SHARE * statistics.median(wall_ms), STEADY_WAIT_SHARE * _steady_wait(wait_ms))
    limit = min(count, start + WAIT_SEARCH_QUEUES * queue)
    empty = ready if _readable(ready, busy_at, start, count) else None
    return start, _last_of_waits(wait_ms, min(wait_ms) + margin_ms, range(start, limit), max(1, workers), empty)


def _last_of_waits(
    wait_ms: Sequence[float], threshold: float, steps: range, waits: int, ready: Sequence[int] | None = None
) -> int | None:
    """The step among ``steps`` at which the ``waits``-th wait over ``threshold`` came (None: fewer came). With
    ``ready``, only a step that found no batch made counts: a batch made and waiting is handed over in 0-2 ms on
    this machine, as long as a wait where the workers are just slower than training (io-heavy at 5 workers: every
    step "waited" 1.0-1.9 ms with 3-5 batches made, a surplus that lasted the whole segment, timed: +4.4-6.1 %)."""
    waited = 0
    for i in steps:
        if wait_ms[i] > threshold and (ready is None or ready[i] == 0):
            waited += 1
            if waited >= waits:
                return i
    return None


def _steady_wait(wait_ms: Sequence[float]) -> float:
    """The mean wait of the later half of a segment's steps above its smallest: its steady state's, once the transient
    is over (0 when the segment is too short to tell)."""
    later = wait_ms[len(wait_ms) // 2 :]
    return max(0.0, statistics.fmean(later) - min(wait_ms)) if len(later) >= 2 else 0.0


def enough(steps: int, seconds: float) -> bool:
    """Whether a speed measured over ``steps`` steps taking ``seconds`` is long enough (:data:`MIN_STEPS`,
    :data:`MIN_SECONDS`)."""
    return steps >= MIN_STEPS and seconds >= MIN_SECONDS


def _spread_pct(rates: Sequence[float], overall: float) -> float:
    return 100 * (max(rates) - min(rates)) / overall if len(rates) > 1 and overall > 0 else 0.0


def whole_periods(steps: int, period: int) -> int:
    """The most of ``steps`` that makes whole periods of ``period`` steps (all of them when fewer than one period)."""
    period = max(1, period)
    return steps - steps % period if steps >= period else steps


def surplus_steps(ready: Sequence[int], first: int, last: int, batches_per_step: float = 1.0, period: int = 1) -> float:
    """How many of the timed steps ``first`` to ``last`` (indices into ``ready``, the step clock's column of batches
    already made when each step asked for its first) a surplus made before them carried, in steps: how far the queue
    of made batches shrank between the two.

    The refill transient (:func:`transient_steps`) ends where every worker has waited; when the workers are only a
    little slower than training, none waits for long after a pause, and the surplus the pause left (the previous
    setting's batches and a full queue, up to 22 batches after a switch to 5 workers) lasts the whole segment: timed
    as it is, the rate is training's own (io-heavy at 5 workers: 43.2 steps/s against 40.8 without dlprof). A
    shrinking queue says so, and the steps it carried come out of the count. 0 when the queue grew or held (training
    is the slower side, and its own speed is the rate), or is unknown.

    ``period``: the steps of one round of the workers' delivery. The queue's level at each end is its mean over a
    round (at most half the steps): within a round it rises and falls with the workers' phase (0 3 2 1 made, round
    after round, at 4 workers), and one step's reading at each end would take that phase for a surplus.
    """
    if last <= first or first < 0 or last >= len(ready):
        return 0.0
    span = max(1, min(period, (last - first + 1) // 2))
    before, after = ready[first : first + span], ready[last - span + 1 : last + 1]
    if min(before) < 0 or min(after) < 0:
        return 0.0
    return max(0.0, statistics.fmean(before) - statistics.fmean(after)) / max(1.0, batches_per_step)


def measure(wall_ms: Sequence[float], transient: int = 0, period: int = 1, surplus: float = 0.0) -> Throughput | None:
    """The rate of ``wall_ms`` (consecutive steps' wall times) after leaving out its first ``transient`` steps, and
    the ``surplus`` steps a surplus carried (:func:`surplus_steps`) out of the count.

    ``period``: the steps of one round of the workers' delivery (``num_workers`` batches; 1 without workers). With a
    few workers, steps come in a repeating pattern (one that waited for two workers' batches, one that found the
    other ready), so a stretch that ends mid-round counts one kind of step once too often: the timed steps are cut
    to whole rounds (:func:`whole_periods`; a segment's steady steps begin with a round, at the step that waited),
    and so are the sub-windows of the spread. None when no step is left, or they took no time.
    """
    timed = list(wall_ms[transient:])
    timed = timed[: whole_periods(len(timed), period)]
    seconds = sum(timed) / 1000
    if not timed or seconds <= 0:
        return None
    surplus = min(max(0.0, surplus), len(timed) - 1)
    rate = (len(timed) - surplus) / seconds
    spread = _spread_pct([len(p) * 1000 / sum(p) for p in _parts(timed, period) if p and sum(p) > 0], rate)
    trusted = _trusted(len(timed), seconds, spread)
    return Throughput(rate, len(timed), seconds, spread, transient, trusted, surplus)


def _parts(timed: list[float], period: int) -> list[list[float]]:
    """``timed`` cut into :data:`SUB_WINDOWS` consecutive parts of whole periods (as even as they can be)."""
    period = max(1, period) if len(timed) >= SUB_WINDOWS * max(1, period) else 1
    rounds = len(timed) // period
    cuts = [period * (rounds * i // SUB_WINDOWS) for i in range(SUB_WINDOWS)] + [len(timed)]
    return [timed[a:b] for a, b in zip(cuts, cuts[1:])]


def combine(parts: Sequence[Throughput]) -> Throughput | None:
    """One rate from several measured parts (the segments of one setting over rounds): all their steps over all
    their time; the spread is the range of the parts' rates (of the one part's sub-windows, when alone)."""
    parts = [p for p in parts if p.steps > 0 and p.seconds > 0]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    steps = sum(p.steps for p in parts)
    seconds = sum(p.seconds for p in parts)
    surplus = sum(p.surplus_steps for p in parts)
    rate = (steps - surplus) / seconds
    spread = _spread_pct([p.steps_per_s for p in parts], rate)
    transient = sum(p.transient_steps for p in parts)
    return Throughput(rate, steps, seconds, spread, transient, _trusted(steps, seconds, spread), surplus)


def _trusted(steps: int, seconds: float, spread_pct: float) -> bool:
    return enough(steps, seconds) and spread_pct <= MAX_SPREAD_PCT
