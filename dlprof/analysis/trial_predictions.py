"""The model's predictions beside the in-process trials' measurements (:mod:`dlprof.analysis.trials`): on the trials'
basis, and at the trials' pace (:class:`~dlprof.results.trials.TrialsPace`).

The predictions rest on the reference steps, which ran in one block before the trials; the trials interleave their
settings in rounds, so a move of the training's (or the machine's) speed between the two falls on every prediction,
while the trials share it. Scaled so that the recorded setting's prediction is what its own trials measured, the
errors at the other settings are the model's own. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from dlprof.analysis.trials import Setting, label
from dlprof.results.advice import Prediction
from dlprof.results.trials import BASIS_IN_EPOCH, TrialSetting, TrialsPace, TrialsResult

#: Where the model's prediction for the recorded setting, anchored to the reference steps, was this far (%) from that
#: setting's own trials, the pace note says the training's speed moved between the two (:func:`with_predictions`):
#: the predictions' own targets are 5-10 %.
ANCHOR_MOVED_PCT = 5.0


def predicted_on_basis(
    prediction: Prediction | None, persistent_workers: bool, basis: str, recorded_persistent: bool
) -> float | None:
    """The model's prediction for a tried setting on ``basis``; None when the model does not predict it.

    The model predicts for the recorded run's ``persistent_workers``, with no restart for persistent workers: over whole
    epochs a persistent setting's prediction is its rate inside an epoch, and a setting whose workers restart has no
    prediction over whole epochs when the run was recorded with persistent workers (the model saw no restart).
    """
    if prediction is None:
        return None
    if basis == BASIS_IN_EPOCH:
        value = prediction.steps_per_s
    elif prediction.epoch_steps_per_s is None:
        value = None
    elif prediction.num_workers == 0 or persistent_workers:
        value = prediction.steps_per_s
    else:
        value = None if recorded_persistent else prediction.epoch_steps_per_s
    return value if value is not None and math.isfinite(value) else None


def with_predictions(
    result: TrialsResult,
    predicted: Sequence[Prediction],
    recorded_persistent: bool,
    recorded_workers: int | None = None,
    from_reference_steps: bool = False,
) -> TrialsResult:
    """``result`` with the model's prediction for each tried setting on its basis and its error against the measured
    speed, % ((predicted - measured) / measured); and the same at the trials' pace (:class:`TrialsPace`), where the
    recorded setting was tried and predicted.

    Args:
        predicted: the advice's predictions (:attr:`dlprof.results.advice.Advice.predicted`).
        recorded_persistent: the recorded run's ``persistent_workers`` (what the predictions assume).
        recorded_workers: the recorded ``num_workers`` (None: unknown, no pace).
        from_reference_steps: whether the predictions are anchored to the run's reference steps (the notes say so).
    """
    by_count = {p.num_workers: p for p in predicted}
    settings = []
    for setting in result.settings:
        guess = predicted_on_basis(
            by_count.get(setting.num_workers), setting.persistent_workers, result.basis, recorded_persistent
        )
        measured = result.measured(setting)
        error = 100 * (guess - measured) / measured if guess is not None and measured else None
        settings.append(replace(setting, predicted_steps_per_s=guess, error_pct=error))
    pace = _pace(result, settings, (recorded_workers, recorded_persistent), from_reference_steps)
    if pace is None:
        return replace(result, settings=tuple(settings))
    paced = []
    for setting in settings:
        measured = result.measured(setting)
        value = setting.predicted_steps_per_s * pace.factor if setting.predicted_steps_per_s is not None else None
        error = None
        if value is not None and measured and (setting.num_workers, setting.persistent_workers) != _key(pace):
            error = 100 * (value - measured) / measured
        paced.append(replace(setting, paced_steps_per_s=value, paced_error_pct=error))
    recorded = next(s for s in settings if (s.num_workers, s.persistent_workers) == _key(pace))
    notes = (*result.notes, _pace_note(pace, recorded))
    return replace(result, settings=tuple(paced), notes=notes, pace=pace)


def _key(pace: TrialsPace) -> Setting:
    return pace.num_workers, pace.persistent_workers


def _pace(
    result: TrialsResult, settings: Sequence[TrialSetting], recorded: tuple[int | None, bool], from_reference: bool
) -> TrialsPace | None:
    """The recorded setting's trials against its prediction (None: it was not tried, measured or predicted)."""
    for setting in settings:
        if (setting.num_workers, setting.persistent_workers) != recorded:
            continue
        measured = result.measured(setting)
        if measured and setting.predicted_steps_per_s:
            return TrialsPace(
                num_workers=setting.num_workers,
                persistent_workers=setting.persistent_workers,
                measured_steps_per_s=measured,
                predicted_steps_per_s=setting.predicted_steps_per_s,
                from_reference_steps=from_reference,
            )
    return None


def _pace_note(pace: TrialsPace, setting: TrialSetting) -> str:
    """The note that says what the predictions beside the trials are scaled by, and why; ``setting`` is the recorded
    one, whose trials set the pace."""
    name = label(pace.num_workers, pace.persistent_workers)
    moved = pace.moved_pct
    source = "the reference steps after the window" if pace.from_reference_steps else "the profiled window"
    note = (
        f"predicted, at the trials' pace: the model's predictions x {pace.factor:.3f}, so that {name} (recorded) is"
        f" predicted at what its own trials measured ({pace.measured_steps_per_s:.2f} steps/s; from {source} the"
        f" model predicted {pace.predicted_steps_per_s:.2f}, {abs(moved):.1f} % {'faster' if moved > 0 else 'slower'})"
    )
    if pace.from_reference_steps and abs(moved) >= ANCHOR_MOVED_PCT:
        note += (
            ": the training's speed moved between the reference steps and the trials, at one setting in one process;"
            " the model's own predictions (its predicted throughput) carry that move, the trials' rounds share it"
        )
    if setting.speed is not None and not setting.speed.trusted:
        # The pace is one measurement: where its rounds disagree, every paced prediction inherits the doubt.
        note += (
            f"; the pace rests on a measurement not to be trusted (its rounds spread {setting.speed.spread_pct:.1f} %):"
            " every paced error shares that doubt"
        )
    return note + "; error %: the model's own, at the other settings"
