"""What the recommendation compares when the in-process trials measured: for the counts tried, their measured speed;
between and beyond them, the model's prediction, corrected by the model's measured error near it.

Every speed is on the trials' basis (over whole epochs, or inside an epoch: ``TrialsResult.basis``), so that a
measured count and a predicted one are compared like with like.

**Why predictions are scaled.** The model's error at a count is mostly a factor that neighbouring counts share
(contention for cores, the hand-off under load: what the bounds leave out grows slowly with the count), and the model
anchors each regime (no workers; workers) on its own. A count with workers that was not tried is therefore compared
after the correction its tried neighbours measured: the ratio measured / predicted, interpolated linearly between the
tried counts with workers on either side of it, and the nearest one's beyond them; a count without workers is never
scaled by a ratio measured with workers. Unscaled, a model that over-predicts by 10 % would make every count it was not
asked about look 10 % better than the counts that were measured, and the recommendation would drift to untried counts
for no reason but the model's bias.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlprof.analysis.trial_predictions import predicted_on_basis
from dlprof.analysis.trials import Setting, label
from dlprof.core.manifest import StepClock
from dlprof.results.advice import Prediction
from dlprof.results.analysis import UnprofiledStats
from dlprof.results.trials import BASIS_WHOLE_EPOCHS, TrialSetting, TrialsResult, TuningCost


@dataclass(frozen=True)
class Candidate:
    """One ``num_workers`` as the recommendation compares it: a speed on the trials' basis, measured or predicted."""

    num_workers: int
    steps_per_s: float
    #: The tried setting this speed was measured at (the faster one, when a count was tried with and without
    #: persistent workers); None for a prediction.
    setting: TrialSetting | None = None
    #: The factor the prediction was scaled by (the model's measured error near this count); 1 when measured.
    scale: float = 1.0

    @property
    def measured(self) -> bool:
        return self.setting is not None


def error_scale(trials: TrialsResult, recorded_persistent: bool) -> Callable[[int], float]:
    """measured / predicted as a function of ``num_workers`` (see the module's docstring); 1 where nothing tells."""
    points = sorted(
        (setting.num_workers, measured / setting.predicted_steps_per_s)
        for setting in trials.settings
        if setting.num_workers > 0
        and setting.persistent_workers == recorded_persistent
        and setting.predicted_steps_per_s
        and (measured := trials.measured(setting))
    )

    def scale(num_workers: int) -> float:
        if num_workers == 0 or not points:
            return 1.0
        if num_workers <= points[0][0]:
            return points[0][1]
        for (lo, lo_ratio), (hi, hi_ratio) in zip(points, points[1:]):
            if num_workers <= hi:
                return lo_ratio + (hi_ratio - lo_ratio) * (num_workers - lo) / (hi - lo)
        return points[-1][1]

    return scale


def candidates(trials: TrialsResult, predicted: Sequence[Prediction], recorded_persistent: bool) -> list[Candidate]:
    """Every count the recommendation can choose from, by ``num_workers``: the tried ones at their measured speed,
    the others at their scaled prediction (``trials`` with its predictions set)."""
    found: dict[int, Candidate] = {}
    for setting in trials.settings:
        rate = trials.measured(setting)
        if rate is None:
            continue
        held = found.get(setting.num_workers)
        if held is None or rate > held.steps_per_s:
            found[setting.num_workers] = Candidate(setting.num_workers, rate, setting)
    scale = error_scale(trials, recorded_persistent)
    for prediction in predicted:
        if prediction.num_workers in found:
            continue
        value = predicted_on_basis(prediction, recorded_persistent, trials.basis, recorded_persistent)
        if value is not None:
            factor = scale(prediction.num_workers)
            found[prediction.num_workers] = Candidate(prediction.num_workers, value * factor, None, factor)
    return [found[n] for n in sorted(found)]


def _name(candidate: Candidate) -> str:
    if candidate.setting is not None:
        return f"{label(candidate.setting.num_workers, candidate.setting.persistent_workers)}, measured"
    return f"num_workers={candidate.num_workers}, predicted (not tried)"


def evidence(
    trials: TrialsResult, chosen: Candidate, best: Candidate, within: float, tried: Sequence[int]
) -> list[str]:
    """The measured numbers, and what the recommended count rests on.

    Args:
        best: the fastest candidate allowed (the one ``chosen`` came within ``within`` of).
        tried: the counts the trials tried (to suggest the next trial when the choice rests on the model).
    """
    measured = [
        f"{label(r.num_workers, r.persistent_workers)} {rate:.2f} steps/s (spread {r.speed.spread_pct:.1f} %)"
        for r in trials.settings
        if (rate := trials.measured(r)) is not None and r.speed is not None
    ]
    lines = [
        f"measured in this training ({trials.rounds} round(s) of in-process trials, {trials.basis}): "
        + ("; ".join(measured) if measured else "no setting got steady steps")
    ]
    near = (
        "the best"
        if best.num_workers == chosen.num_workers
        else f"within {within:.0%} of the best ({_name(best)} {best.steps_per_s:.2f} steps/s)"
    )
    if chosen.setting is not None:
        lines.append(
            f"{label(chosen.setting.num_workers, chosen.setting.persistent_workers)}: measured {chosen.steps_per_s:.2f}"
            f" steps/s {trials.basis}, {near}: the recommendation rests on measurement"
        )
    else:
        scaled = (
            ""
            if chosen.scale == 1.0
            else f" (its prediction scaled by {chosen.scale:.2f}: the model's measured error near it, where tried)"
        )
        counts = ",".join(str(n) for n in sorted({*tried, chosen.num_workers}))
        lines.append(
            f"num_workers={chosen.num_workers} was not tried: the model predicts {chosen.steps_per_s:.2f} steps/s"
            f" {trials.basis}{scaled}, {near}: the recommendation rests on the model; measure it with"
            f" dlprof record --try-workers {counts}"
        )
    shaky = {
        label(r.num_workers, r.persistent_workers): r
        for r in (chosen.setting, best.setting)
        if r is not None and r.speed is not None and not r.speed.trusted
    }
    if shaky:
        lines.append(
            f"caution: the measurement of {' and '.join(shaky)} is not to be trusted (the trials' notes say why), so"
            " the choice may change: measure again with more --trial-rounds or --trial-steps, on a quieter machine"
        )
    return lines


def persistent_comparison(
    trials: TrialsResult, num_workers: int, threshold_pct: float
) -> tuple[bool | None, str] | None:
    """What the trials measured at ``num_workers`` with and without persistent workers, over whole epochs: whether to
    keep the workers (True), let them restart (False), or leave it as it is (None), and why; None when the trials did
    not compare the two there.

    A difference below ``threshold_pct`` % leaves the setting as it is.
    """
    by_persistent = {r.persistent_workers: r for r in trials.settings if r.num_workers == num_workers}
    if num_workers == 0 or len(by_persistent) < 2 or trials.basis != BASIS_WHOLE_EPOCHS:
        return None
    kept, restarted = by_persistent[True].epoch_steps_per_s, by_persistent[False].epoch_steps_per_s
    if kept is None or restarted is None or restarted <= 0:
        return None
    gain = 100 * (kept / restarted - 1)
    measured = (
        f"measured at num_workers={num_workers} over whole epochs: {kept:.2f} steps/s with persistent workers,"
        f" {restarted:.2f} with workers restarting every epoch ({gain:+.1f} %)"
    )
    if gain >= threshold_pct:
        return True, f"{measured}: persistent_workers=True keeps them"
    if gain <= -threshold_pct:
        return False, f"{measured}: persistent_workers=False"
    return None, f"{measured}: within {threshold_pct:g} %, keep the setting as it is"


def tuning_cost(
    trials: TrialsResult,
    chosen: Candidate,
    clock: StepClock,
    own: Setting,
    unprofiled: UnprofiledStats | None,
) -> TuningCost | None:
    """What the trials took (their steps in the step clock) against what ``chosen`` saves over the run's own setting
    ``own`` (its speed measured in the trials where tried, else the reference steps'), both on the trials' basis; and,
    where the training went on at another setting after them (``trials.tuned``, measured), what that setting saved
    over the steps it ran, its speed after the switch against ``own``'s, both inside an epoch.

    None when no segment ran.
    """
    segments = [m.segment for m in trials.segments]
    if not segments:
        return None
    start = min(s.first_step for s in segments)
    stop = min(len(clock), max(s.first_step + s.steps for s in segments))
    steps, seconds = stop - start, sum(clock.wall_ms[start:stop]) / 1000
    own_rate = _own_rate(trials, own, unprofiled, trials.basis == BASIS_WHOLE_EPOCHS)
    own_seconds = steps / own_rate if own_rate else None
    saved = 1000 / own_rate - 1000 / chosen.steps_per_s if own_rate and chosen.steps_per_s > 0 else None
    extra = seconds - own_seconds if own_seconds is not None else None
    payback = 1000 * extra / saved if extra is not None and extra > 0 and saved is not None and saved > 0 else None
    tuned_steps, tuned_saved = _tuned_saving(trials, own, unprofiled)
    return TuningCost(
        steps=steps,
        seconds=seconds,
        own_seconds=own_seconds,
        num_workers=chosen.num_workers,
        chosen_steps_per_s=chosen.steps_per_s,
        own_steps_per_s=own_rate,
        saved_s_per_1000=saved,
        payback_steps=payback,
        tuned_steps=tuned_steps,
        tuned_saved_s=tuned_saved,
    )


def _own_rate(
    trials: TrialsResult, own: Setting, unprofiled: UnprofiledStats | None, whole_epochs: bool
) -> float | None:
    """The run's own setting's speed, over whole epochs or inside one: its trial's where tried, else the reference
    steps' (inside an epoch where whole epochs were not timed)."""
    rate = next(
        (
            r.epoch_steps_per_s if whole_epochs else r.steps_per_s
            for r in trials.settings
            if (r.num_workers, r.persistent_workers) == own
        ),
        None,
    )
    if rate is None and unprofiled is not None:
        whole = whole_epochs and unprofiled.epoch_steps_per_s is not None
        rate = unprofiled.epoch_steps_per_s if whole else unprofiled.steps_per_s
    return rate


def _tuned_saving(
    trials: TrialsResult, own: Setting, unprofiled: UnprofiledStats | None
) -> tuple[int | None, float | None]:
    """The steps run after the switch, and the seconds the setting switched to saved over them against ``own`` (both
    speeds inside an epoch: the speed after the switch is measured on no other basis); (None, None) when not known."""
    tuned = trials.tuned
    if tuned is None or not tuned.steps_per_s or (tuned.num_workers, tuned.persistent_workers) == own:
        return None, None
    own_rate = _own_rate(trials, own, unprofiled, whole_epochs=False)
    if not own_rate:
        return None, None
    return tuned.steps_at_setting, tuned.steps_at_setting * (1 / own_rate - 1 / tuned.steps_per_s)
