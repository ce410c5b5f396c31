"""The in-process trials (``dlprof record --try-workers``): every tried DataLoader setting's speed, measured inside the
one running training, next to what the model predicted for it.

The trials trained on after the reference steps, switching the training DataLoader between settings in rounds
(``Manifest.trials``); each stretch at one setting is a :class:`~dlprof.core.manifest.TrialSegment` of the step clock.

* **A segment's speed.** Its steps from the step clock, cut at its pauses: the switch that starts it, and every epoch
  start inside it. After each pause the refill transient is left out (:func:`dlprof.core.throughput.transient_steps`),
  with a queue of :func:`~dlprof.core.throughput.queue_steps` for the segment's ``num_workers``; right after the switch,
  for the previous setting's too: the batches it had in flight are kept and served first, so the first steps of the
  new setting take batches it did not make. Where workers were started (the switch to a setting with workers, an
  epoch start without persistent workers) at least :data:`~dlprof.core.manifest.EPOCH_SETTLE_STEPS` are left out
  as well: forking slows the next steps. The steady steps left are measured as steps over time
  (:func:`dlprof.core.throughput.measure`), less the steps a surplus still there carried (the queue of batches already
  made shrank over them: ``StepClock.ready``, :func:`dlprof.core.throughput.surplus_steps`).
* **A setting's speed.** Its segments over the rounds combined (:func:`dlprof.core.throughput.combine`: all steps
  over all their time; the spread is the range of the rounds' rates).
* **A setting's restart** (what an epoch boundary costs it), in this order of preference:

  1. measured at real epoch boundaries inside its segments: the steps left out after the epoch start, less as many
     steady steps (the restart's whole cost: shutting the workers down, starting new ones, the first batch, and the
     slowdown forking causes);
  2. without workers, none;
  3. workers that restart (``persistent_workers=False``): measured the same way at the switches to it, which shut
     the previous workers down and start new ones as an epoch boundary does (the switch falls in the segment's
     first step); without steady steps to measure against, from the switches' timings: the median time from creating
     the iterator to its first batch plus the median time to shut its workers down when the trials left it, a rough
     estimate that errs high, because part of that first batch is made while training would have waited for it
     anyway (docs/ARCHITECTURE.md#facts-the-code-relies-on);
  4. persistent workers: the wait for an epoch's first batch, which the workers, alive, make from scratch: a step's
     batches made by ``num_workers`` workers in parallel, ``ceil(batches per step / num_workers)`` batch times, at the
     batch time measured in the loader processes; without worker spans, the switches' wait for the first batch less
     the creation of the iterator (an upper bound: a fresh worker also initialises).

* **The padding segment** (``TrialSegment.trim_padding``: the last setting again, its batches trimmed to their longest
  real sequence; no workers started) is not a setting tried: :class:`~dlprof.results.trials.PaddingTrial` sets its
  steady speed against that setting's own; the rounds, restarts and switches are measured without it.
* **Over whole epochs**, when the epoch length is known: ``steps per epoch / (steps per epoch / rate + restart)``.
  The trials compare over whole epochs when every setting measured has that speed, else inside an epoch
  (:data:`~dlprof.results.trials.BASIS_WHOLE_EPOCHS`, :data:`~dlprof.results.trials.BASIS_IN_EPOCH`).

* **The training after the trials** (``--then best|keep``): :mod:`dlprof.analysis.tuned`, its speed at the chosen
  setting measured as a segment is, beside that setting's trial.

* **The trials' pace.** The predictions rest on the reference steps, which ran in one block before the trials; the
  trials interleave their settings in rounds, so a move of the training's (or the machine's) speed between the two
  falls on every prediction, while the trials share it. Beside the trials the predictions are therefore also given
  at the trials' pace (:class:`~dlprof.results.trials.TrialsPace`): scaled so that the recorded setting's matches its
  own trials. Their errors at the other settings are then the model's own.

:func:`trials_result` measures; :func:`dlprof.analysis.trial_predictions.with_predictions` sets the model's predictions
beside the measurements once the advice has made them. Torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dlprof.analysis import batch_widths
from dlprof.analysis.segments import Piece, segment_pieces, steady_speed, steady_steps, switched_loader
from dlprof.analysis.trial_memory import segment_pss, workers_pss
from dlprof.analysis.tuned import switch_pieces, tuned_run
from dlprof.core import throughput
from dlprof.core.manifest import (
    TRIM_MIN_PCT,
    Manifest,
    StepClock,
    Trials,
    TrialSegment,
)
from dlprof.results.analysis import LoaderStats, Throughput
from dlprof.results.trials import (
    BASIS_IN_EPOCH,
    BASIS_WHOLE_EPOCHS,
    MeasuredSegment,
    PaddingTrial,
    TrialSetting,
    TrialsResult,
    WidthScaling,
    setting_label,
)

#: A DataLoader setting tried: (num_workers, persistent_workers).
Setting = tuple[int, bool]


#: How the notes name a setting (the advice's evidence too).
label = setting_label


# ------------------------------------------------------------------------------------ one segment


def _wait_pct(clock: StepClock, steady: list[int]) -> float | None:
    """Share of the ``steady`` steps' time (every segment's) spent waiting for data, %."""
    wall = sum(clock.wall_ms[i] for i in steady)
    return 100 * sum(clock.wait_ms[i] for i in steady) / wall if wall > 0 else None


def _excess_ms(clock: StepClock, piece: Piece, steady_ms: float) -> float:
    """What the pause that starts ``piece`` cost (an epoch boundary, or a switch): its left-out steps (at least the
    first) beyond as many steady ones."""
    window = max(1, piece.left_out)
    return max(0.0, sum(clock.wall_ms[piece.start : piece.start + window]) - window * steady_ms)


# ------------------------------------------------------------------------------------ one setting


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(frozen=True)
class _Restart:
    ms: float | None
    #: How it was found, for the notes (a key of :data:`_RESTART_NOTES`, or "none"); None when unknown.
    source: str | None


def _restart(
    setting: Setting,
    pauses: tuple[list[float], list[float]],
    switched_to: list[TrialSegment],
    shutdowns: list[float | None],
    loader: LoaderStats | None,
    batches_per_step: float,
) -> _Restart:
    """``pauses``: what the epoch boundaries inside the setting's segments cost, and what the switches to it cost."""
    num_workers, persistent = setting
    boundaries, switches = pauses
    if num_workers == 0:  # nothing to start at an epoch boundary: any excess measured there is noise
        return _Restart(0.0, "none")
    if boundaries:
        return _Restart(statistics.median(boundaries), "boundaries")
    if not persistent:
        if switches:
            return _Restart(statistics.median(switches), "switches")
        first, shutdown = _median([s.first_batch_ms for s in switched_to]), _median(shutdowns)
        if first is None or shutdown is None:
            return _Restart(None, None)
        return _Restart(first + shutdown, "switch timings")
    if loader is not None and loader.batches:
        return _Restart(math.ceil(batches_per_step / num_workers) * loader.batch.mean_ms, "estimated")
    waits = [
        s.first_batch_ms - s.start_ms for s in switched_to if s.first_batch_ms is not None and s.start_ms is not None
    ]
    return _Restart(max(0.0, statistics.median(waits)), "first batch") if waits else _Restart(None, None)


def _epoch_rate(speed: Throughput | None, restart_ms: float | None, steps_per_epoch: float | None) -> float | None:
    if speed is None or restart_ms is None or not steps_per_epoch or speed.steps_per_s <= 0:
        return None
    return steps_per_epoch / (steps_per_epoch / speed.steps_per_s + restart_ms / 1000)


# ------------------------------------------------------------------------------------ the trials


def _settings(trials: Trials) -> list[Setting]:
    """Every setting that ran a segment, by num_workers, the persistent one after the other."""
    return sorted({(s.num_workers, s.persistent_workers) for s in trials.segments})


def _complete_rounds(trials: Trials) -> int:
    """Rounds in which every asked-for count ran (and, with ``--try-persistent``, every count with workers ran with
    persistent workers too)."""
    rounds = 0
    for r in sorted({s.round for s in trials.segments}):
        ran = {(s.num_workers, s.persistent_workers) for s in trials.segments if s.round == r}
        counts = {n for n, _ in ran}
        persistent = {n for n, p in ran if p}
        if all(n in counts for n in trials.counts) and (
            not trials.persistent or all(n in persistent for n in trials.counts if n > 0)
        ):
            rounds += 1
    return rounds


def _shutdowns(trials: Trials, recorded: Setting) -> dict[Setting, list[float | None]]:
    """Per setting, the shut-downs of its workers the switches away from it measured."""
    ordered = sorted(trials.segments, key=lambda s: s.first_step)
    previous = [recorded] + [(s.num_workers, s.persistent_workers) for s in ordered[:-1]]
    found: dict[Setting, list[float | None]] = {}
    for before, segment in zip(previous, ordered):
        found.setdefault(before, []).append(segment.shutdown_ms)
    return found


def _first_queues(trials: Trials, recorded: Setting, prefetch: int | None, batches_per_step: float) -> list[int]:
    """Per segment (in the order of ``trials.segments``), the queue left after its switch: its own setting's, or the
    previous setting's batches in flight, kept and served first, whichever is longer."""
    ordered = sorted(range(len(trials.segments)), key=lambda i: trials.segments[i].first_step)
    queues = [0] * len(trials.segments)
    before = recorded[0]
    for i in ordered:
        segment = trials.segments[i]
        queues[i] = max(
            throughput.queue_steps(segment.num_workers, prefetch, batches_per_step),
            throughput.queue_steps(before, prefetch, batches_per_step),
        )
        before = segment.num_workers
    return queues


_RESTART_NOTES = {
    "boundaries": "restart measured at epoch boundaries inside the trials (the steps after the epoch start beyond"
    " steady ones)",
    "switches": "restart measured at the switches to it (the steps after the switch beyond steady ones: a switch shuts"
    " the workers down and starts new ones, as an epoch boundary does)",
    "switch timings": "restart from the switches' timings: creating the iterator to its first batch, plus shutting the"
    " workers down (a rough estimate: training would have waited for part of that first batch anyway)",
    "estimated": "restart of persistent workers estimated as the wait for an epoch's first batch: a step's batches made"
    " afresh by the workers in parallel, at the batch time measured in the loader processes",
    "first batch": "restart of persistent workers estimated from the switches' wait for the first batch, less creating"
    " the iterator (an upper bound: a fresh worker also initialises)",
}


def _notes(
    trials: Trials, settings: list[TrialSetting], sources: dict[Setting, str | None], rounds: int, basis: str
) -> list[str]:
    notes = list(trials.notes)
    if trials.incomplete:
        notes.append(
            f"the trials ended early ({trials.incomplete}): {rounds} of {trials.rounds} round(s) ran to their end"
        )
    elif rounds < trials.rounds:
        notes.append(f"{rounds} of {trials.rounds} round(s) ran to their end")
    tried = {r.num_workers for r in settings}
    notes += [f"num_workers={n}: not tried (no segment ran)" for n in trials.counts if n not in tried]
    for setting in settings:
        name = label(setting.num_workers, setting.persistent_workers)
        speed = setting.speed
        if speed is None:
            notes.append(f"{name}: no steady steps (every step was refill transient); raise --trial-steps")
        elif not throughput.enough(speed.steps, speed.seconds):
            short = [f"fewer than {throughput.MIN_STEPS} steps"] if speed.steps < throughput.MIN_STEPS else []
            short += [f"less than {throughput.MIN_SECONDS:g} s"] if speed.seconds < throughput.MIN_SECONDS else []
            notes.append(
                f"{name}: {speed.steps} steady steps in {speed.seconds:.2f} s, {' and '.join(short)}: too short to"
                " trust; raise --trial-steps"
            )
        elif speed.spread_pct > throughput.MAX_SPREAD_PCT:
            notes.append(
                f"{name}: its rate varied {speed.spread_pct:.0f} % between rounds (more than"
                f" {throughput.MAX_SPREAD_PCT:g} %): too wide to trust"
            )
    for source, note in _RESTART_NOTES.items():
        names = [label(*setting) for setting, s in sources.items() if s == source]
        if names:
            notes.append(f"{note}: {', '.join(names)}")
    unknown = [
        label(r.num_workers, r.persistent_workers) for r in settings if r.speed is not None and r.restart_ms is None
    ]
    if unknown and basis == BASIS_IN_EPOCH:
        notes.append(f"compared inside an epoch: the restart of {', '.join(unknown)} is unknown")
    return notes


def trials_result(
    manifest: Manifest | None, batches_per_step: float, loader: LoaderStats | None = None
) -> TrialsResult | None:
    """What the in-process trials of this run measured; None for a run without trials (or without a step clock).

    The predictions are not set yet (:func:`~dlprof.analysis.trial_predictions.with_predictions` sets them).

    Args:
        batches_per_step: the run's batches per training step (the queue's length in steps, the epoch's in steps).
        loader: the loader's statistics (its batch time estimates a persistent worker's first batch of an epoch).
    """
    if manifest is None or manifest.trials is None or not len(manifest.step_clock):
        return None
    # The padding segment is not a setting tried: it is measured against its setting's own segments.
    padding_segments = [s for s in manifest.trials.segments if s.trim_padding]
    trials = replace(manifest.trials, segments=tuple(s for s in manifest.trials.segments if not s.trim_padding))
    clock = manifest.step_clock
    config = switched_loader(manifest)
    prefetch = config.prefetch_factor if config else None
    recorded = ((config.num_workers or 0) if config else 0, bool(config and config.persistent_workers))
    first_queues = _first_queues(trials, recorded, prefetch, batches_per_step)
    shutdowns = _shutdowns(trials, recorded)
    steps_per_epoch = config.length / batches_per_step if config and config.length else None
    settings, sources = [], {}
    limit = trials.max_worker_memory_mib
    segment_speeds: dict[int, Throughput | None] = {}
    steady: dict[Setting, list[int]] = {}
    # Each setting's segments (their indices) and their pieces: all of them, and the steps after a switch, first
    # tell whether the speeds are to be scaled to the run's mean batch.
    pieces_of: dict[Setting, tuple[list[int], list[list[Piece]]]] = {}
    for setting in _settings(trials):
        mine = [i for i, s in enumerate(trials.segments) if (s.num_workers, s.persistent_workers) == setting]
        queue = throughput.queue_steps(setting[0], prefetch, batches_per_step)
        busy_at = throughput.all_busy_below(setting[0], prefetch)
        cut = [segment_pieces(clock, trials.segments[i], (first_queues[i], queue), busy_at) for i in mine]
        pieces_of[setting] = (mine, cut)
    fitted = [p for _, cut in pieces_of.values() for ps in cut for p in ps] + switch_pieces(manifest, batches_per_step)
    scaler = batch_widths.scaler(manifest, config.id if config else None, [steady_steps([p]) for p in fitted])
    for setting, (mine, pieces) in pieces_of.items():
        speeds = [steady_speed(clock, p, batches_per_step, setting[0], scaler) for p in pieces]
        segment_speeds.update(zip(mine, speeds))
        steady[setting] = steady_steps(p for ps in pieces for p in ps)
        speed = throughput.combine([s for s in speeds if s is not None])
        pauses: tuple[list[float], list[float]] = ([], [])
        if speed is not None:
            steady_ms = 1000 / speed.steps_per_s
            pauses = (
                [_excess_ms(clock, p, steady_ms) for ps in pieces for p in ps if p.boundary],
                [_excess_ms(clock, ps[0], steady_ms) for ps in pieces if ps],
            )
        switched_to = [trials.segments[i] for i in mine]
        restart = _restart(setting, pauses, switched_to, shutdowns.get(setting, []), loader, batches_per_step)
        sources[setting] = restart.source
        settings.append(
            TrialSetting(
                num_workers=setting[0],
                persistent_workers=setting[1],
                speed=speed,
                epoch_steps_per_s=_epoch_rate(speed, restart.ms, steps_per_epoch),
                restart_ms=restart.ms,
                segments=len(mine),
                predicted_steps_per_s=None,
                error_pct=None,
                data_wait_pct=_wait_pct(clock, steady[setting]) if speed is not None else None,
                workers_pss_mib=(pss := workers_pss(manifest, [trials.segments[i] for i in mine])),
                over_memory_limit=pss is not None and limit is not None and pss > limit,
            )
        )
    measured = [r for r in settings if r.speed is not None]
    whole = bool(measured) and all(r.epoch_steps_per_s is not None for r in measured)
    basis = BASIS_WHOLE_EPOCHS if whole else BASIS_IN_EPOCH
    rounds = _complete_rounds(trials)
    scaling = _width_scaling(scaler, settings)
    notes = _notes(trials, settings, sources, rounds, basis) + ([batch_widths.note(scaling)] if scaling else [])
    padding, padding_speeds = _padding_trial(
        clock, trials, padding_segments, settings, prefetch, batches_per_step, scaler
    )
    speed_of = {id(s): segment_speeds.get(i) for i, s in enumerate(trials.segments)}
    speed_of.update((id(s), speed) for s, speed in zip(padding_segments, padding_speeds))
    return TrialsResult(
        rounds=rounds,
        rounds_planned=trials.rounds,
        basis=basis,
        settings=tuple(settings),
        notes=tuple(notes),
        segments=tuple(
            MeasuredSegment(s, speed_of.get(id(s)), segment_pss(manifest, s)) for s in manifest.trials.segments
        ),
        padding=padding,
        padding_not_measured=None if padding is not None else _padding_not_measured(trials),
        max_worker_memory_mib=limit,
        tuned=tuned_run(manifest, settings, batches_per_step, steady, scaler),
        width_scaling=scaling,
    )


def _width_scaling(scaler: batch_widths.Scaler | None, settings: Sequence[TrialSetting]) -> WidthScaling | None:
    """The scaling the trials' speeds were measured with, and the range it moved them by; None: not scaled."""
    if scaler is None:
        return None
    moved = [s.speed.width_scaled_pct for s in settings if s.speed is not None and s.speed.width_scaled_pct is not None]
    return replace(scaler.scaling, low_pct=min(moved, default=0.0), high_pct=max(moved, default=0.0))


def _padding_trial(
    clock: StepClock,
    trials: Trials,
    segments: list[TrialSegment],
    settings: list[TrialSetting],
    prefetch: int | None,
    batches_per_step: float,
    scaler: batch_widths.Scaler | None,
) -> tuple[PaddingTrial | None, list[Throughput | None]]:
    """The padding segment's speed against its setting's, padded (steady steps inside an epoch, both); and each
    padding segment's own speed."""
    if not segments:
        return None, []
    first = segments[0]
    setting = (first.num_workers, first.persistent_workers)
    queue = throughput.queue_steps(setting[0], prefetch, batches_per_step)
    busy_at = throughput.all_busy_below(setting[0], prefetch)
    pieces = [segment_pieces(clock, s, (0, queue), busy_at, started=False) for s in segments]
    speeds = [steady_speed(clock, p, batches_per_step, setting[0], scaler) for p in pieces]
    trimmed = throughput.combine([s for s in speeds if s is not None])
    padded = next((r for r in settings if (r.num_workers, r.persistent_workers) == setting), None)
    padded_rate = padded.steps_per_s if padded is not None else None
    gain = 100 * (trimmed.steps_per_s / padded_rate - 1) if trimmed is not None and padded_rate else None
    trusted = (
        trimmed is not None
        and padded is not None
        and padded.speed is not None
        and all(throughput.enough(s.steps, s.seconds) for s in (trimmed, padded.speed))
        and padded.speed.spread_pct <= throughput.MAX_SPREAD_PCT
    )
    measured = PaddingTrial(
        num_workers=setting[0],
        persistent_workers=setting[1],
        trimmed_pct=trials.trimmable_pct,
        trimmed=trimmed,
        padded_steps_per_s=padded_rate,
        gain_pct=gain,
        trusted=trusted,
    )
    return measured, speeds


def _padding_not_measured(trials: Trials) -> str | None:
    """Why the trials measured no padding segment (None: its batches were not checked, or nothing calls for one)."""
    if trials.trim_refused is not None:
        return f"the trials did not trim the batches: {trials.trim_refused}"
    if trials.incomplete and trials.trimmable_pct is not None and trials.trimmable_pct >= TRIM_MIN_PCT:
        return "the trials ended before the segment with trimmed batches"
    return None
