"""The answer first: the one line every report leads with, made from the recommendation once, here.

It names what to change (every setting the advice changes, as recorded -> as advised), what that buys (how much faster,
on the basis the recommendation compared: over whole epochs or inside an epoch) and what it rests on (measured in this
training, or predicted), and the fact the gain comes from, read off the predictions and the trials (what restarting
workers costs, what binds at the recorded count). Where nothing pays, it says so with the recommendation's own rule
(:data:`~dlprof.advice.rules.CHOOSE_WITHIN`). Renderers print :attr:`Headline.text`; they never build it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlprof.advice.measured import candidates
from dlprof.advice.model import CONTENTION
from dlprof.advice.rules import CHOOSE_WITHIN, SHARED_MEMORY, WORKER_MEMORY_LIMIT, close_enough
from dlprof.analysis.trial_predictions import predicted_on_basis
from dlprof.results.advice import (
    HEADLINE_CHANGE,
    HEADLINE_KEEP,
    HEADLINE_NONE,
    RESTS_ON_MEASURED,
    RESTS_ON_PREDICTED,
    Advice,
    Headline,
)
from dlprof.results.findings import (
    FINDING_PADDING,
    GAIN_MEASURED,
    GAIN_PREDICTED,
    GAIN_UP_TO,
    SEVERITY_ERROR,
    Finding,
)
from dlprof.results.report import RunInfo
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, TrialSetting, TrialsResult

#: How the headline names where a measurement comes from: the running training's trials, or a sweep's launches.
IN_THIS_TRAINING = "in this training"
IN_THIS_SWEEP = "in this sweep"
#: Why workers pay for a run recorded without them.
MAIN_PROCESS_LOADS = "the main process loads every batch itself"
#: Findings whose upper bound ("up to") may lead the headline: padding's counts only the forward and backward passes,
#: which padding each batch to its longest sequence shrinks nearly in proportion to the tokens. The threads finding's
#: bound (all of the training thread's waits for a core) stays in the findings: other work makes those waits too.
BOUNDS_THAT_LEAD = frozenset({FINDING_PADDING})


@dataclass(frozen=True)
class _Speed:
    """One setting's speed on the compared basis, and whether it was measured or predicted."""

    steps_per_s: float
    measured: bool


def _rate(steps_per_s: float) -> str:
    """A speed as the headline prints it: one decimal from 10 steps/s up, two below."""
    return f"{steps_per_s:.1f}" if steps_per_s >= 10 else f"{steps_per_s:.2f}"


def _pct(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _within() -> str:
    """The recommendation's rule, as the headline names it: ``2 %``."""
    return f"{100 * CHOOSE_WITHIN:g} %"


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"


def _changes(advice: Advice, info: RunInfo) -> list[str]:
    """``setting recorded -> advised`` for each setting the advice changes, in the recommendation's order."""
    pairs = [
        ("num_workers", info.num_workers, advice.num_workers),
        ("pin_memory", info.pin_memory, advice.pin_memory),
        ("prefetch_factor", info.prefetch_factor, advice.prefetch_factor),
        ("persistent_workers", info.persistent_workers, advice.persistent_workers),
    ]
    return [
        f"{name} {'unknown' if was is None else was} -> {now}"
        for name, was, now in pairs
        if now is not None and now != was
    ]


class _Speeds:
    """A run's speeds on the basis its recommendation compared: measured where the trials tried a setting (when they
    compared on that basis), else predicted (scaled by the model's measured error, as the recommendation saw them)."""

    def __init__(self, advice: Advice, trials: TrialsResult | None, recorded_persistent: bool) -> None:
        self.basis = advice.compared_on or BASIS_IN_EPOCH
        self.persistent = recorded_persistent
        self.trials = trials if trials is not None and trials.basis == self.basis else None
        self.by_count = {p.num_workers: p for p in advice.predicted}
        found = candidates(self.trials, advice.predicted, recorded_persistent) if self.trials else []
        self.scaled = {c.num_workers: c.steps_per_s for c in found if not c.measured}

    def trial(self, num_workers: int, persistent: bool) -> TrialSetting | None:
        if self.trials is None:
            return None
        persistent = persistent and num_workers > 0
        return next(
            (r for r in self.trials.settings if r.num_workers == num_workers and r.persistent_workers == persistent),
            None,
        )

    def of(self, num_workers: int, persistent: bool) -> _Speed | None:
        setting = self.trial(num_workers, persistent)
        rate = self.trials.measured(setting) if self.trials is not None and setting is not None else None
        if rate is not None:
            return _Speed(rate, True)
        if persistent == self.persistent and num_workers in self.scaled:
            return _Speed(self.scaled[num_workers], False)
        rate = predicted_on_basis(self.by_count.get(num_workers), persistent, self.basis, self.persistent)
        return None if rate is None else _Speed(rate, False)

    def in_epoch(self, num_workers: int, persistent: bool) -> float | None:
        """Steady steps/s inside an epoch, restarts left out: measured when tried, else predicted."""
        setting = self.trial(num_workers, persistent)
        if setting is not None and setting.steps_per_s is not None:
            return setting.steps_per_s
        prediction = self.by_count.get(num_workers)
        return prediction.steps_per_s if prediction is not None else None

    def restart_ms(self, num_workers: int) -> float | None:
        """What restarting ``num_workers`` workers costs per epoch: measured when tried, else the model's."""
        setting = self.trial(num_workers, False)
        if setting is not None and setting.restart_ms is not None:
            return setting.restart_ms
        prediction = self.by_count.get(num_workers)
        return prediction.restart_ms if prediction is not None and prediction.restart_ms > 0 else None

    def best(self) -> tuple[int, _Speed] | None:
        """The fastest count at the recorded persistent_workers, whatever limits the recommendation applied."""
        speeds = [(n, s) for n in self.by_count if (s := self.of(n, self.persistent)) is not None]
        if self.trials is not None:
            speeds += [
                (r.num_workers, _Speed(rate, True)) for r in self.trials.settings if (rate := self.trials.measured(r))
            ]
        return max(speeds, key=lambda item: item[1].steps_per_s, default=None)


def restarts_clause(restart_ms: float) -> str:
    return f"workers restart at every epoch, {restart_ms:.0f} ms each"


def _reason(advice: Advice, speeds: _Speeds, was: tuple[int, bool], now: tuple[int, bool], pays: bool) -> str | None:
    """The fact the change's gain comes from: what restarting workers costs, or what binds at the recorded count."""
    (was_n, was_p), (now_n, now_p) = was, now
    restarts_matter = advice.bound == "worker restarts"
    # Restarts add to the gain when it is larger over whole epochs than inside one.
    restarts_add = False
    if not restarts_matter and speeds.basis == BASIS_WHOLE_EPOCHS and pays:
        before, after = speeds.in_epoch(was_n, was_p), speeds.in_epoch(now_n, now_p)
        before_all, after_all = speeds.of(was_n, was_p), speeds.of(now_n, now_p)
        if before is not None and after is not None:
            # Faster over whole epochs, not inside one: the restarts make the whole difference.
            restarts_matter = close_enough(before, after) or after < before
            restarts_add = (
                before_all is not None
                and after_all is not None
                and after_all.steps_per_s / before_all.steps_per_s > after / before
            )
    if now_n < was_n:
        restart = speeds.restart_ms(was_n) if not was_p else None
        if restarts_matter and restart is not None:
            return restarts_clause(restart)
        fewer = was_n - now_n
        extra = f"the {fewer}{'' if now_n == 0 else ' extra'} worker{'s' if fewer != 1 else ''}"
        costs = f"{extra} cost the main process more than they supply" if pays else f"{extra} buy nothing"
        if restarts_add and restart is not None:
            return f"{costs}, and {restarts_clause(restart).replace('workers restart', 'restart')}"
        return costs
    if now_n > was_n:
        if was_n == 0:
            return MAIN_PROCESS_LOADS
        bound = speeds.by_count[was_n].bound if was_n in speeds.by_count else None
        if bound == "loader":
            return f"loading binds at {_workers(was_n)}"
        if bound in ("cpu", CONTENTION):
            return f"the cores bind at {_workers(was_n)}"
    if now_p and not was_p and now_n > 0 and (restart := speeds.restart_ms(now_n)) is not None:
        return restarts_clause(restart)
    return None


def _other_reason(advice: Advice, info: RunInfo) -> str:
    """Why the advice changes a setting the model predicts no speed for (pin_memory, prefetch_factor)."""
    if advice.pin_memory is False and info.device == "cpu":
        return "pin_memory does nothing without a GPU"
    if advice.pin_memory is True:
        return "copies to the GPU from pageable memory wait; pinned ones do not"
    if advice.prefetch_factor is not None:
        return "the waits for data are bursty: more batches buffered per worker"
    return "see the evidence"


def _compared(to: _Speed, source: _Speed | None, where: str) -> str:
    """``predicted A vs B steps/s`` or ``measured in this training: A vs B steps/s`` (A: the advised setting)."""
    if source is None:
        return f"measured {where}: {_rate(to.steps_per_s)} steps/s" if to.measured else "predicted"
    if to.measured and source.measured:
        return f"measured {where}: {_rate(to.steps_per_s)} vs {_rate(source.steps_per_s)} steps/s"
    if not to.measured and not source.measured:
        return f"predicted {_rate(to.steps_per_s)} vs {_rate(source.steps_per_s)} steps/s"
    if source.measured:
        return f"predicted {_rate(to.steps_per_s)} steps/s, not tried, vs {_rate(source.steps_per_s)} measured {where}"
    return f"measured {where}: {_rate(to.steps_per_s)} steps/s, vs {_rate(source.steps_per_s)} predicted"


def change_headline(
    change: str,
    to: _Speed | None,
    source: _Speed | None,
    compared_on: str,
    basis: str,
    reason: str | None,
    fewer_workers: int = 0,
    where: str = IN_THIS_TRAINING,
) -> Headline:
    """A change and what it buys: ``<change>: <gain> % faster <basis> (<measured or predicted: A vs B steps/s>;
    <reason>)``, or ``as fast`` with fewer workers when the gain is within CHOOSE_WITHIN."""
    gain = None
    if to is None:
        effect = "no speed known for it"
    elif source is None or source.steps_per_s <= 0:
        effect = f"{_rate(to.steps_per_s)} steps/s {compared_on}"
    else:
        gain = 100 * (to.steps_per_s / source.steps_per_s - 1)
        if not close_enough(source.steps_per_s, to.steps_per_s):
            effect = f"{_pct(gain)} % faster {compared_on}"
        elif fewer_workers:
            effect = f"as fast {compared_on} with {fewer_workers} fewer worker{'s' if fewer_workers != 1 else ''}"
        elif gain < 0:
            effect = f"{_pct(-gain)} % slower {compared_on}"
        else:
            effect = f"as fast {compared_on}"
    why = [] if to is None else [_compared(to, source, where)]
    why += [reason] if reason else []
    text = f"{change}: {effect}" + (f" ({'; '.join(why)})" if why else "")
    return Headline(text=text, change=change, gain_pct=gain, basis=basis, kind=HEADLINE_CHANGE, reason=reason)


def _keep(advice: Advice, speeds: _Speeds, was: tuple[int, bool] | None) -> Headline:
    """No change: nothing is more than CHOOSE_WITHIN faster, or what is, a limit rules out."""
    measured = advice.rests_on == RESTS_ON_MEASURED
    plain = (
        f"keep your settings: no setting is more than {_within()} faster (measured {IN_THIS_TRAINING})"
        if measured
        else f"keep your settings: no setting is predicted more than {_within()} faster"
    )
    text = plain
    current = speeds.of(*was) if was is not None else None
    best = speeds.best()
    if was is not None and current and best is not None and not close_enough(current.steps_per_s, best[1].steps_per_s):
        count, speed = best
        gain = 100 * (speed.steps_per_s / current.steps_per_s - 1)
        how = "measured" if speed.measured else "predicted"
        limit = {
            "memory": "more workers would not fit in memory",
            "cpu": "loading is CPU-bound: no more workers than the usable cores",
            SHARED_MEMORY: "their batches in flight would not fit in /dev/shm",
            WORKER_MEMORY_LIMIT: "its workers would take more memory than --max-worker-memory",
        }.get(advice.bound or "", f"the recommendation keeps num_workers={was[0]} (bound by {advice.bound})")
        text = f"keep your settings: num_workers={count} is {how} {_pct(gain)} % faster, but {limit}"
    return Headline(text=text, change=None, gain_pct=None, basis=advice.rests_on, kind=HEADLINE_KEEP)


def headline(advice: Advice, info: RunInfo, trials: TrialsResult | None = None) -> Headline:
    """The first line of ``info``'s report: the advice's changes to the recorded settings and what they buy; led by the
    largest finding (:attr:`Advice.findings`) when it buys more (:func:`leads`).

    Args:
        trials: the run's in-process trials, when it has some: the measured speeds the recommendation compared.
    """
    return with_finding(_settings_headline(advice, info, trials), advice.findings)


def leads(finding: Finding) -> bool:
    """Whether a finding's gain may lead the headline: measured or predicted, or an upper bound in
    :data:`BOUNDS_THAT_LEAD`."""
    if finding.gain_pct is None or finding.gain_pct <= 0:
        return False
    return finding.gain_basis in (GAIN_MEASURED, GAIN_PREDICTED) or (
        finding.gain_basis == GAIN_UP_TO and finding.id in BOUNDS_THAT_LEAD
    )


def with_finding(line: Headline, findings: Sequence[Finding]) -> Headline:
    """``line`` led by an error-severity finding (samples repeated, training stopped), else by the finding with the
    largest gain when that gain beats the settings' change (any gain beats no change); the settings' change follows it
    (``; also ...``). ``line`` itself otherwise."""
    error = next((f for f in findings if f.severity == SEVERITY_ERROR), None)
    if error is not None:  # a fault that repeats samples or stops training comes before any speed
        text = f"{error.title}" + (f" ({error.reason})" if error.reason else "")
        if line.kind == HEADLINE_CHANGE:
            text += f"; also {line.text}"
        return Headline(
            text=text,
            change=error.title,
            gain_pct=None,
            basis=None,
            kind=HEADLINE_CHANGE,
            reason=error.reason,
        )
    leading = max((f for f in findings if leads(f)), key=lambda f: f.gain_pct or 0.0, default=None)
    if leading is None or leading.gain_pct is None:
        return line
    settings_gain = (line.gain_pct or 0.0) if line.kind == HEADLINE_CHANGE else 0.0
    if leading.gain_pct <= settings_gain:
        return line
    bound = "up to " if leading.gain_basis == GAIN_UP_TO else ""
    why = {GAIN_UP_TO: "a bound from the tokens", GAIN_MEASURED: f"measured {IN_THIS_TRAINING}"}.get(
        leading.gain_basis, leading.gain_basis
    )
    text = f"{leading.title}: {bound}{_pct(leading.gain_pct)} % faster ({why}" + (
        f"; {leading.reason})" if leading.reason else ")"
    )
    if line.kind == HEADLINE_CHANGE:
        text += f"; also {line.text}"
    return Headline(
        text=text,
        change=leading.title,
        gain_pct=leading.gain_pct,
        basis=leading.gain_basis,
        kind=HEADLINE_CHANGE,
        reason=leading.reason,
    )


def _settings_headline(advice: Advice, info: RunInfo, trials: TrialsResult | None) -> Headline:
    """The advice's changes to the recorded DataLoader settings and what they buy."""
    changes = _changes(advice, info)
    recorded_persistent = bool(info.persistent_workers)
    speeds = _Speeds(advice, trials, recorded_persistent)
    was = None if info.num_workers is None else (info.num_workers, recorded_persistent and info.num_workers > 0)
    if not changes:
        if advice.num_workers is None:
            text = (
                "no num_workers recommendation: what a batch costs to produce is unknown (record with dlprof record"
                " to measure it)"
                if not advice.predicted
                else "no num_workers recommendation (see what this rests on)"
            )
            return Headline(text=text, change=None, gain_pct=None, basis=None, kind=HEADLINE_NONE)
        return _keep(advice, speeds, was)
    change = ", ".join(changes)
    now_n = advice.num_workers if advice.num_workers is not None else info.num_workers
    if now_n is None:
        return Headline(
            text=f"{change}: no speed predicted ({_other_reason(advice, info)})",
            change=change,
            gain_pct=None,
            basis=None,
        )
    persistent = advice.persistent_workers if advice.persistent_workers is not None else recorded_persistent
    now = (now_n, persistent and now_n > 0)
    if was == now:  # only settings the model predicts no speed for
        return Headline(
            text=f"{change}: no speed predicted ({_other_reason(advice, info)})",
            change=change,
            gain_pct=None,
            basis=None,
        )
    to = speeds.of(*now)
    source = speeds.of(*was) if was is not None else None
    pays = to is not None and source is not None and not close_enough(source.steps_per_s, to.steps_per_s)
    reason = _reason(advice, speeds, was, now, pays) if was is not None else None
    fewer = max(0, was[0] - now_n) if was is not None else 0
    basis = RESTS_ON_MEASURED if advice.rests_on == RESTS_ON_MEASURED else RESTS_ON_PREDICTED
    return change_headline(change, to, source, speeds.basis, basis, reason, fewer)


def measured_headline(
    was: int,
    now: int,
    speeds_by_count: Sequence[tuple[int, float]],
    compared_on: str,
    where: str = IN_THIS_SWEEP,
    trials: TrialsResult | None = None,
) -> Headline:
    """A sweep's first line: its first count against the fewest workers measured within CHOOSE_WITHIN of the best.

    Args:
        speeds_by_count: every swept count's measured steps/s, on ``compared_on``.
        trials: the in-process trials that measured them, if any: what an epoch boundary cost at each count.
    """
    speeds = dict(speeds_by_count)
    if now == was:
        return Headline(
            text=(
                f"keep num_workers={was}: no other count is more than {_within()} faster (measured {where}:"
                f" {_rate(speeds[was])} steps/s {compared_on})"
            ),
            change=None,
            gain_pct=None,
            basis=RESTS_ON_MEASURED,
            kind=HEADLINE_KEEP,
        )
    to, source = _Speed(speeds[now], True), _Speed(speeds[was], True)
    if was == 0:
        reason: str | None = MAIN_PROCESS_LOADS
    else:
        reason = _measured_restarts(trials, was, now) if compared_on == BASIS_WHOLE_EPOCHS and now < was else None
    return change_headline(
        f"num_workers {was} -> {now}", to, source, compared_on, RESTS_ON_MEASURED, reason, max(0, was - now), where
    )


def _measured_restarts(trials: TrialsResult | None, was: int, now: int) -> str | None:
    """The restarts clause, when the trials measured fewer workers no faster inside an epoch: over whole epochs, the
    restarts make the difference."""
    by_count = {r.num_workers: r for r in (trials.settings if trials is not None else ()) if not r.persistent_workers}
    before, after = by_count.get(was), by_count.get(now)
    if before is None or after is None or before.restart_ms is None:
        return None
    inside = before.steps_per_s, after.steps_per_s
    if inside[0] is None or inside[1] is None or not close_enough(inside[0], inside[1]):
        return None
    return restarts_clause(before.restart_ms)
