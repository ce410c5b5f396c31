"""Step times that follow their batches' widths: the trials' speeds scaled to the run's mean batch.

A training that pads each batch to its longest sequence (a Trainer with ``DataCollatorWithPadding``, the built-in
workload) computes on batches whose token positions (rows x width) vary several-fold from step to step, and a step's
time follows them (on CPU, correlation 0.98 at 0 workers). A trial segment lasts about an epoch; the steady steps of one
may hold batches a few per cent narrower or wider than the run's, and its speed reads that much high or low: a
setting's trials moved by up to 6 % on their batches alone (docs/validation.md#a-trainers-batch-widths).

Each batch's positions are known (``Manifest.batches``, measured where it was made), taken in the training loader's
order (epoch, then batch: the order an in-order DataLoader hands them over, a switch's kept batches first), and the
step clock says how many batches each step took. The slope of a step's time on its batches' positions is fitted
within the steady pieces (each piece's own means taken out: a setting's speed is not a width's), at a lag of 0 and of
1 step (a loader read one batch ahead, as accelerate's ``DataLoaderShard`` is, hands each step the batch taken in the
step before), and the better fit kept. Where it explains the times (correlation at least :data:`MIN_CORRELATION` over
at least :data:`MIN_STEPS` steps), each steady step's time is moved to what as many batches of the run's mean would
have taken: ``wall + slope x (batches x mean positions - positions)``, and the speeds are measured on those times.
Torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dlprof.core.manifest import Manifest, StepClock
from dlprof.results.trials import WidthScaling

#: The fit must explain the step times this well (within the pieces) to scale by it.
MIN_CORRELATION = 0.5
#: ...over at least this many steps.
MIN_STEPS = 30
#: Batches made but never taken (the queue when the training ended) beyond which the batches are not matched to the
#: steps (another loader's batches counted in the steps, or the probe missed some): this many, plus
#: :data:`MAX_UNTAKEN_PCT` of those taken.
MAX_UNTAKEN = 64
MAX_UNTAKEN_PCT = 5.0


@dataclass(frozen=True)
class StepWidths:
    """The token positions each step took: ``positions[i]`` over the ``batches[i]`` batches of step ``i``."""

    positions: tuple[int, ...]
    batches: tuple[int, ...]
    #: The positions of the mean batch taken.
    mean_positions: float


@dataclass(frozen=True)
class Scaler:
    """Moves steady steps' times to the run's mean batch (:func:`scaler`)."""

    widths: StepWidths
    scaling: WidthScaling

    def wall_ms(self, clock: StepClock, steps: Sequence[int]) -> list[float]:
        """The wall ms of ``steps`` had each taken as many batches of the run's mean positions."""
        lag, slope, mean = self.scaling.lag_steps, self.scaling.ms_per_position, self.widths.mean_positions
        scaled = []
        for i in steps:
            j = i - lag
            batches, positions = (self.widths.batches[j], self.widths.positions[j]) if j >= 0 else (0, 0)
            scaled.append(max(0.0, clock.wall_ms[i] + slope * (batches * mean - positions)))
        return scaled


def step_widths(manifest: Manifest, loader_id: int | None) -> StepWidths | None:
    """The positions each step of the step clock took from loader ``loader_id``; None where the batches cannot be
    matched to the steps (none measured, one unmeasured or without a token tensor, more taken than made, or more made
    than taken than a queue holds)."""
    facts, clock = manifest.batches, manifest.step_clock
    if loader_id is None or not len(facts) or facts.unmeasured or not facts.columns_agree() or not len(clock):
        return None
    mine = sorted(
        (i for i in range(len(facts)) if facts.loader[i] == loader_id),
        key=lambda i: (facts.epoch[i], facts.batch[i], facts.made_ns[i]),
    )
    taken = sum(clock.batches)
    untaken = len(mine) - taken
    if not taken or untaken < 0 or untaken > MAX_UNTAKEN + MAX_UNTAKEN_PCT / 100 * taken:
        return None
    per_batch = [facts.rows[i] * facts.width[i] for i in mine]
    if min(per_batch[:taken]) <= 0:
        return None
    positions, at = [], 0
    for count in clock.batches:
        positions.append(sum(per_batch[at : at + count]))
        at += count
    return StepWidths(tuple(positions), tuple(clock.batches), sum(per_batch[:taken]) / taken)


def fit(clock: StepClock, widths: StepWidths, pieces: Sequence[Sequence[int]]) -> WidthScaling | None:
    """The slope of the steps' times on their batches' positions within ``pieces`` (each a piece's steady steps), at
    the lag that fits better; None where it explains too little (:data:`MIN_CORRELATION`, :data:`MIN_STEPS`), or a
    wider batch is not slower."""
    best: WidthScaling | None = None
    for lag in (0, 1):
        usual = Counter(widths.batches[i - lag] for piece in pieces for i in piece if i >= lag).most_common(1)
        if not usual or usual[0][0] <= 0:
            continue
        xs: list[float] = []
        ys: list[float] = []
        for piece in pieces:
            # Steps that took the usual number of batches: one that took none or two straddles a lag's boundary.
            steps = [i for i in piece if i >= lag and widths.batches[i - lag] == usual[0][0]]
            if len(steps) < 2:
                continue
            x = [float(widths.positions[i - lag]) for i in steps]
            y = [clock.wall_ms[i] for i in steps]
            mx, my = statistics.fmean(x), statistics.fmean(y)
            xs += [v - mx for v in x]
            ys += [v - my for v in y]
        sxx, syy = sum(v * v for v in xs), sum(v * v for v in ys)
        if len(xs) < MIN_STEPS or sxx <= 0 or syy <= 0:
            continue
        sxy = sum(a * b for a, b in zip(xs, ys))
        correlation = sxy / math.sqrt(sxx * syy)
        if best is None or correlation > best.correlation:
            best = WidthScaling(
                mean_positions=widths.mean_positions,
                ms_per_position=sxy / sxx,
                correlation=correlation,
                steps=len(xs),
                lag_steps=lag,
            )
    if best is None or best.correlation < MIN_CORRELATION or best.ms_per_position <= 0:
        return None
    return best


def scaler(manifest: Manifest, loader_id: int | None, pieces: Sequence[Sequence[int]]) -> Scaler | None:
    """What scales the steady steps of this run's speeds to its mean batch; None where the widths do not vary, or do
    not move the steps (:func:`fit`), or cannot be matched to the steps (:func:`step_widths`)."""
    widths = step_widths(manifest, loader_id)
    if widths is None:
        return None
    scaling = fit(manifest.step_clock, widths, pieces)
    return Scaler(widths, scaling) if scaling is not None else None


def note(scaling: WidthScaling) -> str:
    """The trials' note saying that, and by how much, their speeds were scaled."""
    lag = "; each step computes on the batch taken the step before: the loader is read one batch ahead"
    lag = lag if scaling.lag_steps else ""
    moved = (
        f"{scaling.low_pct:+.1f} %"
        if round(scaling.low_pct, 1) == round(scaling.high_pct, 1)
        else f"{scaling.low_pct:+.1f} % to {scaling.high_pct:+.1f} %"
    )
    return (
        f"batch widths vary and the steps follow them (correlation {scaling.correlation:.2f} over {scaling.steps:,}"
        f" steps, {1000 * scaling.ms_per_position:.1f} ms per 1,000 token positions{lag}): every speed is scaled to"
        f" the run's mean batch of {scaling.mean_positions:,.0f} positions, which moved the trials' speeds by {moved}"
    )
