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

# How long a speed must be timed comes from the variation of training measured without dlprof
# (scripts/measure_variation.py): the shortest window that keeps steps of one cost close to their long-run rate,
# leaving batches of varying length to the spread and to whole epochs (dlprof.core.manifest.whole_epochs_to_time);
# see docs/validation.md and docs/ARCHITECTURE.md#facts-the-code-relies-on.

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
#: p90, and steps of one cost timed for MIN_STEPS and MIN_SECONDS stay well inside it.
MAX_SPREAD_PCT = 10.0
#: A step waited for its batch when its wait exceeds the segment's smallest wait (the hand-off of a ready
#: batch) by this share of its median step: below it, what a surplus of batches saves is that small too (a
#: pipeline whose steady waits stay under it runs within about this share of its consumer's own speed, so a
#: surplus left unseen biases the rate by less).
WAITED_SHARE = 0.04
#: ... and by this share of the mean wait of the segment's later half (its steady state): the hand-off of a ready
#: batch jitters enough by itself to pass for a wait at WAITED_SHARE alone, while where the workers bind, the real
#: waits carry each round's whole shortfall and stand above half the mean (see docs/ARCHITECTURE.md's facts).
STEADY_WAIT_SHARE = 0.5
#: After the queue's worth of steps, look this many queues' worth further for the steps that waited; a
#: pipeline that has not waited once per worker by then is bound by its consumer (the queue stays full: steady
#: already). A surplus of a queue lasts ``queue / gap`` steps when the producers are slower than the consumer
#: by a share ``gap``: 25 queues find it down to a 4 % gap, the bound :data:`WAITED_SHARE` sets (below it the
#: surplus biases the rate by less than 4 %). A search that runs long on a loader bound by its consumer only wastes
#: steps, never biases the rate, since its queue stays full anyway.
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
    #: queue's ups and downs between two steps are the workers' phase, not a surplus. Nor where the queue never fell
    #: to every worker busy: training is the slower side, the workers idle on a full queue, and what training takes
    #: from it is no faster for the batches kept from before; either taken out would make the rate slow.
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
    if busy_at is not None and _draining(ready, busy_at, start, count) and (found is None or count - found < MIN_STEPS):
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
    surplus the pause left in the queue is gone (stopping at the first wait keeps the other workers' surplus).

    When fewer steps wait within :data:`WAIT_SEARCH_QUEUES` queues' worth of steps, the queue never empties (the
    consumer is the slower side) and the segment is steady after ``queue`` steps. With ``ready`` (the step clock's
    batches already made at each step, :func:`surplus_steps`) and ``busy_at`` (:func:`all_busy_below`), when the
    waits do not come, or leave fewer than :data:`MIN_STEPS` steps, the transient ends at the first step from
    ``queue`` on at which every worker is busy again: the surplus left there is measured and taken out of the rate
    instead, because workers a little slower than training can leave a pause's surplus for the whole segment.
    """
    return transient(wall_ms, wait_ms, queue, workers, ready, busy_at).steps


def _readable(ready: Sequence[int], busy_at: int | None, start: int, count: int) -> bool:
    return busy_at is not None and len(ready) == count and all(r >= 0 for r in ready[start:])


def _draining(ready: Sequence[int], busy_at: int | None, start: int, count: int) -> bool:
    """Whether the workers are the slower side: over the later half of the segment the queue of made batches stays
    at or below every worker busy (its median). Where it stays above, training is the slower side, the workers idle
    on a full queue, and a dip to ``busy_at`` is the queue's jitter, not the end of a surplus (ending there could
    leave almost no steps to time)."""
    if busy_at is None or not _readable(ready, busy_at, start, count):
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
    ``ready``, only a step that found no batch made counts: the hand-off of a batch made and waiting takes as long
    as a real wait where the workers are just slower than training, and counting it would time a surplus."""
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
    setting's batches and a full queue) lasts the whole segment: timed as it is, the rate is training's own, not the
    loader's. A shrinking queue says so, and the steps it carried come out of the count. 0 when the queue grew or
    held (training is the slower side, and its own speed is the rate), or is unknown.

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
    return Throughput(
        steps_per_s=rate,
        steps=len(timed),
        seconds=seconds,
        spread_pct=spread,
        transient_steps=transient,
        trusted=trusted,
        surplus_steps=surplus,
    )


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
    scaled_pct = None
    if all(p.width_scaled_pct is not None for p in parts):  # each part's own seconds, before the scaling
        own_seconds = sum(p.seconds * (1 + (p.width_scaled_pct or 0) / 100) for p in parts)
        scaled_pct = 100 * (own_seconds / seconds - 1)
    spread = _spread_pct([p.steps_per_s for p in parts], rate)
    transient = sum(p.transient_steps for p in parts)
    return Throughput(
        steps_per_s=rate,
        steps=steps,
        seconds=seconds,
        spread_pct=spread,
        transient_steps=transient,
        trusted=_trusted(steps, seconds, spread),
        surplus_steps=surplus,
        width_scaled_pct=scaled_pct,
    )


def _trusted(steps: int, seconds: float, spread_pct: float) -> bool:
    return enough(steps, seconds) and spread_pct <= MAX_SPREAD_PCT
