"""Recommendations, each with the numbers from the run that justify it: the input-bound verdict, the num_workers
chosen on the predictions (or on the trials' measurements), and pin_memory, prefetch_factor and persistent_workers
(:mod:`dlprof.advice.settings`); and the input pipeline's faults beyond them (:mod:`dlprof.advice.findings`).
Thresholds are named constants; what the model needs from the run is :mod:`dlprof.advice.inputs`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from dlprof.advice.findings import input_findings
from dlprof.advice.inputs import model_inputs
from dlprof.advice.measured import Candidate, candidates, tuning_cost
from dlprof.advice.measured import evidence as measured_evidence
from dlprof.advice.model import CONTENTION, ModelInputs, candidate_counts, memory_limit, predict
from dlprof.advice.settings import (
    UNDECIDED,
    persistent_from_trials,
    persistent_workers_setting,
    pin_memory_setting,
    prefetch_factor_setting,
    tokenizer_evidence,
    trainer_arguments,
)
from dlprof.analysis.pipeline import fits, pipeline_facts
from dlprof.analysis.trial_predictions import with_predictions
from dlprof.analysis.trials import label
from dlprof.core.manifest import LoaderConfig, Manifest
from dlprof.results.advice import RESTS_ON_MEASURED, RESTS_ON_PREDICTED, Advice, Prediction
from dlprof.results.analysis import GpuStats, LoaderStats, StepBreakdown, UnprofiledStats
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, TrialsResult

# Input-bound verdicts, from TensorFlow's input-pipeline analyser: share of step time waiting for input.
HIGHLY_INPUT_BOUND_PCT = 20.0
MODERATELY_INPUT_BOUND_PCT = 5.0
#: The recommended num_workers must reach within this fraction of the best throughput the training gets (what
#: `dlprof sweep` checks); a gain below it is too small to name a limit or worker restarts as what binds.
WITHIN_BEST = 0.05
#: Recommend the smallest num_workers within this fraction of the best, predicted or measured in the trials:
#: WITHIN_BEST less what the speeds of two counts can stray from the user's own training without dlprof, in opposite
#: directions, so that the count chosen stays within WITHIN_BEST of the best in truth: a plateau bound by the main
#: process drifts by a few per cent between launches, so a looser rule would chase noise (scripts/bench_advice.py;
#: see docs/ARCHITECTURE.md#facts-the-code-relies-on).
CHOOSE_WITHIN = 0.02
#: Workers may use at most this share of the RAM available when the run was recorded (the model,
#: optimizer state and the OS need the rest).
MEMORY_BUDGET_FRACTION = 0.5
#: The bound that names /dev/shm: no more workers than those whose batches in flight fit in its free space.
SHARED_MEMORY = "shared memory"
#: The bound of ``--max-worker-memory``: settings whose workers take more memory together are not recommended.
WORKER_MEMORY_LIMIT = "worker memory limit"
#: Fewer recorded steps than this make percentiles (and the bursty-wait rule) unreliable.
MIN_STEPS_FOR_PERCENTILES = 5


def close_enough(steps_per_s: float, best_steps_per_s: float) -> bool:
    """Whether a count at ``steps_per_s`` is within CHOOSE_WITHIN of the best: the recommendation is the fewest workers
    for which this holds, on predictions and trials alike, and ``dlprof sweep`` checks it on the measured speeds."""
    return steps_per_s >= best_steps_per_s * (1 - CHOOSE_WITHIN)


def verdict_of(data_wait_pct: float) -> str:
    if data_wait_pct > HIGHLY_INPUT_BOUND_PCT:
        return "HIGHLY"
    if data_wait_pct >= MODERATELY_INPUT_BOUND_PCT:
        return "MODERATELY"
    return "NOT"


def _choose(
    inputs: ModelInputs,
    predicted: list[Prediction],
    cpu_bound_loading: bool,
    shm_cap: int | None = None,
    ruled_out: Collection[int] = (),
) -> tuple[int, str]:
    """The fewest workers within CHOOSE_WITHIN of the best throughput training gets (over whole epochs when known), no
    more than ``shm_cap`` (the most whose batches in flight fit in /dev/shm; None: unknown), none of ``ruled_out``
    (``--max-worker-memory``)."""
    allowed = [p for p in predicted if p.num_workers not in ruled_out]
    limits = []
    memory_cap = memory_limit(inputs, MEMORY_BUDGET_FRACTION)
    if memory_cap is not None:
        allowed = [p for p in allowed if p.num_workers <= memory_cap]
        limits.append(("memory", memory_cap))
    if cpu_bound_loading and inputs.usable_cores:
        allowed = [p for p in allowed if p.num_workers <= inputs.usable_cores]
        limits.append(("cpu", inputs.usable_cores))
    if shm_cap is not None:
        allowed = [p for p in allowed if p.num_workers <= shm_cap]
        limits.append((SHARED_MEMORY, shm_cap))
    best = max(p.effective_steps_per_s for p in allowed)
    chosen = next(p for p in allowed if close_enough(p.effective_steps_per_s, best))
    unconstrained = max(p.effective_steps_per_s for p in predicted)
    if unconstrained > best * (1 + WITHIN_BEST):  # a limit, not the model, stopped us
        for name, cap in limits:
            if chosen.num_workers >= cap:
                return chosen.num_workers, name
        if ruled_out:
            return chosen.num_workers, WORKER_MEMORY_LIMIT
    steady_best = min(allowed, key=lambda p: p.step_ms)
    if chosen.epoch_steps_per_s is not None and steady_best.steps_per_s > chosen.steps_per_s * (1 + WITHIN_BEST):
        return (
            chosen.num_workers,
            "worker restarts",
        )  # more workers would be faster inside an epoch, not over whole ones
    return chosen.num_workers, chosen.bound


@dataclass(frozen=True, kw_only=True)
class _Choice:
    """The recommended count, the bound that sets it, and what it rests on."""

    num_workers: int
    bound: str | None
    rests_on: str
    compared_on: str
    #: With trials: the candidate chosen and the best one allowed (for the evidence).
    chosen: Candidate | None = None
    best: Candidate | None = None


def _choose_with_trials(
    inputs: ModelInputs | None,
    predicted: list[Prediction],
    cpu_bound_loading: bool,
    trials: TrialsResult,
    recorded_persistent: bool,
    shm_cap: int | None = None,
    ruled_out: Collection[int] = (),
) -> _Choice | None:
    """The fewest workers within CHOOSE_WITHIN of the best speed on the trials' basis, none of ``ruled_out``
    (``--max-worker-memory``): measured where tried,
    the scaled prediction elsewhere (:mod:`dlprof.advice.measured`). None when nothing was measured or predicted on
    that basis.

    The memory and shared-memory bounds hold for every count (a trial is too short to show what more workers' memory
    does over a training); the bound of CPU-bound loading at the usable cores only for predicted counts (a measured
    count's speed has the contention for cores in it).
    """
    everyone = candidates(trials, predicted, recorded_persistent)
    found = [c for c in everyone if c.num_workers not in ruled_out]
    if not any(c.measured for c in found):
        return None
    memory_cap = memory_limit(inputs, MEMORY_BUDGET_FRACTION) if inputs is not None else None
    cpu_cap = inputs.usable_cores if inputs is not None and cpu_bound_loading else None
    allowed = [
        c
        for c in found
        if (memory_cap is None or c.num_workers <= memory_cap)
        and (shm_cap is None or c.num_workers <= shm_cap)
        and (c.measured or cpu_cap is None or c.num_workers <= cpu_cap)
    ]
    if not allowed:
        return None
    best = max(allowed, key=lambda c: c.steps_per_s)
    chosen = next(c for c in allowed if close_enough(c.steps_per_s, best.steps_per_s))
    by_count = {p.num_workers: p for p in predicted}
    bound = by_count[chosen.num_workers].bound if chosen.num_workers in by_count else None
    if max(c.steps_per_s for c in found) > best.steps_per_s * (1 + WITHIN_BEST):  # a limit, not the speeds, stopped us
        for name, cap in (("memory", memory_cap), ("cpu", cpu_cap), (SHARED_MEMORY, shm_cap)):
            if cap is not None and chosen.num_workers >= cap:
                bound = name
                break
    if ruled_out and max(c.steps_per_s for c in everyone) > best.steps_per_s * (1 + WITHIN_BEST):
        bound = WORKER_MEMORY_LIMIT  # a faster setting was ruled out by --max-worker-memory
    if chosen.setting is not None and not chosen.setting.persistent_workers and trials.basis == BASIS_WHOLE_EPOCHS:
        steady = max((r.steps_per_s for r in trials.settings if r.steps_per_s is not None), default=None)
        in_epoch = chosen.setting.steps_per_s
        if steady is not None and in_epoch is not None and steady > in_epoch * (1 + WITHIN_BEST):
            bound = "worker restarts"  # another setting measured faster inside an epoch, not over whole ones
    rests_on = RESTS_ON_MEASURED if chosen.measured else RESTS_ON_PREDICTED
    return _Choice(
        num_workers=chosen.num_workers,
        bound=bound,
        rests_on=rests_on,
        compared_on=trials.basis,
        chosen=chosen,
        best=best,
    )


def over_memory_limit(
    trials: TrialsResult, inputs: ModelInputs | None, counts: Collection[int]
) -> dict[int, tuple[float, bool]]:
    """The ``counts`` (and the counts tried) whose workers take more memory together than the trials'
    ``--max-worker-memory``, each with that
    memory (PSS, MiB) and whether it was measured (in its trial) or predicted (the most a worker took in any trial, or
    in the recorded run, times the count). Empty without a limit."""
    limit = trials.max_worker_memory_mib
    if limit is None:
        return {}
    measured: dict[int, float] = {}
    for setting in trials.settings:
        if setting.workers_pss_mib is not None:
            measured[setting.num_workers] = max(setting.workers_pss_mib, measured.get(setting.num_workers, 0.0))
    each = [pss / n for n, pss in measured.items() if n > 0]
    if not each and inputs is not None and inputs.worker_pss_mib:
        each = [inputs.worker_pss_mib]
    per_worker = max(each, default=None)
    over: dict[int, tuple[float, bool]] = {}
    for count in sorted(set(counts) | set(measured)):
        if count == 0:
            continue
        if count in measured:
            if measured[count] > limit:
                over[count] = (measured[count], True)
        elif per_worker is not None and count * per_worker > limit:
            over[count] = (count * per_worker, False)
    return over


def _choice(
    inputs: ModelInputs | None,
    predicted: list[Prediction],
    cpu_bound_loading: bool,
    trials: TrialsResult | None,
    recorded_persistent: bool,
    shm_cap: int | None = None,
) -> _Choice | None:
    """The recommended count: on the trials' measurements when the run has some, else on the predictions alone."""
    ruled_out = over_memory_limit(trials, inputs, [p.num_workers for p in predicted]) if trials is not None else {}
    if trials is not None:
        choice = _choose_with_trials(
            inputs, predicted, cpu_bound_loading, trials, recorded_persistent, shm_cap, ruled_out
        )
        if choice is not None:
            return choice
    if inputs is None:
        return None
    num_workers, bound = _choose(inputs, predicted, cpu_bound_loading, shm_cap, ruled_out)
    basis = BASIS_WHOLE_EPOCHS if predicted[0].epoch_steps_per_s is not None else BASIS_IN_EPOCH
    return _Choice(num_workers=num_workers, bound=bound, rests_on=RESTS_ON_PREDICTED, compared_on=basis)


def advise(
    steps: StepBreakdown,
    loader: LoaderStats | None,
    gpu: GpuStats | None,
    manifest: Manifest | None,
    batches_per_step: float,
    loads_in_main: bool | None,
    unprofiled: UnprofiledStats | None = None,
    manifest_problems: tuple[str, ...] = (),
    trials: TrialsResult | None = None,
) -> tuple[Advice, TrialsResult | None]:
    """Recommend DataLoader settings for the run behind these statistics; and its trials, the model's predictions set
    beside their measurements (None without trials).

    Args:
        loads_in_main: whether the run loaded batches in the main process (num_workers=0); None if unknown.
        unprofiled: the run's unprofiled reference steps (its real speed), when it has them.
        manifest_problems: what was wrong with the manifest; repeated in the basis.
        trials: what the run's in-process trials measured (:func:`dlprof.analysis.trials.trials_result`): the
            recommendation then rests on measurement for the counts tried.
    """
    basis: list[str] = [] if manifest else ["no dlprof manifest: loader settings, cores and memory are unknown"]
    basis += manifest_problems
    if len(steps.steps) < MIN_STEPS_FOR_PERCENTILES:
        basis.append(
            f"only {len(steps.steps)} step(s) recorded: p50/p90 say little; record more (dlprof record --active 20)"
        )
    loader_config = manifest.loader if manifest else None
    verdict = verdict_of(steps.data_wait_pct)
    evidence = _speed_evidence(steps, verdict, unprofiled)
    inputs = model_inputs(steps, loader, gpu, manifest, batches_per_step, loads_in_main, unprofiled, basis)
    predicted = [predict(inputs, n) for n in candidate_counts(inputs)] if inputs is not None else []
    recorded_persistent = bool(loader_config is not None and loader_config.persistent_workers)
    if trials is not None:
        recorded_workers = (loader_config.num_workers or 0) if loader_config is not None else None
        anchored = inputs is not None and inputs.anchor is not None and inputs.anchor[0] == recorded_workers
        trials = with_predictions(trials, predicted, recorded_persistent, recorded_workers, anchored)
    cpu_bound_loading = loader.bound == "cpu" if loader else True
    facts = pipeline_facts(manifest, loader, unprofiled)
    shm_cap = facts.shared_memory.max_workers if facts.shared_memory is not None else None
    choice = _choice(inputs, predicted, cpu_bound_loading, trials, recorded_persistent, shm_cap)
    num_workers = choice.num_workers if choice else None
    bound = choice.bound if choice else None
    if choice is not None and inputs is not None and choice.num_workers < len(predicted):
        evidence += _num_workers_evidence(
            inputs, predicted, choice.num_workers, bound, loader_config, choice.chosen is None
        )
    if choice is not None and choice.chosen is not None:
        assert trials is not None and choice.best is not None  # a choice among the trials names the best one too
        assert manifest is not None  # trials come from a manifest
        evidence += measured_evidence(trials, choice.chosen, choice.best, CHOOSE_WITHIN, trials_tried(manifest))
        own = ((loader_config.num_workers or 0) if loader_config else 0, recorded_persistent)
        trials = replace(trials, cost=tuning_cost(trials, choice.chosen, manifest.step_clock, own, unprofiled))
    if trials is not None and (ruled_out := over_memory_limit(trials, inputs, [p.num_workers for p in predicted])):
        evidence.append(_ruled_out_line(trials, ruled_out))
    if loader is not None:
        evidence.append(
            f"per batch: fetch {loader.fetch.mean_ms:.2f} ms, tokenizer {loader.tokenize.mean_ms:.2f} ms, collate"
            f" {loader.collate.mean_ms:.2f} ms (CPU/wall {loader.cpu_fraction:.2f}: {loader.bound}-bound)"
        )
    pin_memory = pin_memory_setting(gpu, loader_config, evidence)
    prefetch = prefetch_factor_setting(steps, inputs, num_workers, evidence)
    if prefetch is not None and num_workers and not fits(facts.shared_memory, num_workers, prefetch):
        evidence.append(f"prefetch_factor={prefetch} is not advised: its batches in flight would not fit in /dev/shm")
        prefetch = None
    persistent = persistent_from_trials(trials, num_workers, loader_config, evidence)
    if persistent is UNDECIDED:
        persistent = persistent_workers_setting(manifest, loader_config, inputs, predicted, num_workers, evidence)
    if choice is not None and bound == "worker restarts":
        evidence.append(_restarts_line(predicted, choice, trials))
    evidence += tokenizer_evidence(loader)
    advice = Advice(
        verdict=verdict,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch,
        persistent_workers=persistent,
        bound=bound,
        predicted=predicted,
        evidence=evidence,
        basis=basis,
    )
    # The model's own pick, the trials left out: the same choice when there were none.
    model = (
        choice if trials is None else _choice(inputs, predicted, cpu_bound_loading, None, recorded_persistent, shm_cap)
    )
    # Counts beyond /dev/shm are worth a warning only where they bound the recommendation.
    shm_bound = [p.num_workers for p in predicted] if bound == SHARED_MEMORY else []
    found = input_findings(facts, steps, loader, inputs, num_workers, shm_bound, loader_config, trials)
    advice = replace(
        advice,
        findings=found,
        rests_on=choice.rests_on if choice else RESTS_ON_PREDICTED,
        compared_on=choice.compared_on if choice else None,
        model_num_workers=model.num_workers if model else None,
    )
    return replace(advice, trainer_arguments=trainer_arguments(advice, loader_config)), trials


def _ruled_out_line(trials: TrialsResult, ruled_out: dict[int, tuple[float, bool]]) -> str:
    """Which counts ``--max-worker-memory`` ruled out, with their workers' memory."""
    measured = [f"num_workers={n} ({mib:,.0f} MiB measured)" for n, (mib, tried) in ruled_out.items() if tried]
    predicted = sorted(n for n, (_, tried) in ruled_out.items() if not tried)
    if predicted:
        first = ruled_out[predicted[0]][0]
        measured.append(f"{_counts_text(predicted)} (from {first:,.0f} MiB, predicted)")
    return (
        f"--max-worker-memory {trials.max_worker_memory_mib:,.0f} MiB rules out {', '.join(measured)}: their workers'"
        " memory together (PSS) is more"
    )


def trials_tried(manifest: Manifest | None) -> tuple[int, ...]:
    """The counts the run's trials asked for (``--try-workers``)."""
    return manifest.trials.counts if manifest is not None and manifest.trials is not None else ()


def _restarts_line(predicted: list[Prediction], choice: _Choice, trials: TrialsResult | None) -> str:
    """Why fewer workers win over whole epochs: more would be faster inside an epoch, if they did not restart."""
    if choice.chosen is not None and choice.chosen.setting is not None and trials is not None:
        speed, fastest = max(
            ((r.steps_per_s, r) for r in trials.settings if r.steps_per_s is not None), key=lambda pair: pair[0]
        )
        return (
            "restarting workers at every epoch costs more than they save: inside an epoch,"
            f" {label(fastest.num_workers, fastest.persistent_workers)} measured {speed:.2f} steps/s;"
            " with persistent_workers=True it keeps its workers"
        )
    steady_best = min(predicted, key=lambda p: p.step_ms)
    return (
        "restarting workers at every epoch costs more than they save: with persistent_workers=True, "
        f"num_workers={steady_best.num_workers} is predicted at {steady_best.steps_per_s:.2f} steps/s"
    )


def _speed_evidence(steps: StepBreakdown, verdict: str, unprofiled: UnprofiledStats | None) -> list[str]:
    """How input-bound the run is, and what the profiler cost it."""
    wait = steps.categories["data_wait"]
    evidence = [
        f"data wait {wait.mean_ms:.2f} ms of a {steps.step.mean_ms:.2f} ms step ({steps.data_wait_pct:.1f} %):"
        f" {verdict} input-bound (HIGHLY > {HIGHLY_INPUT_BOUND_PCT:g} %, MODERATELY"
        f" {MODERATELY_INPUT_BOUND_PCT:g}-{HIGHLY_INPUT_BOUND_PCT:g} %)"
    ]
    if unprofiled is not None and unprofiled.overhead_pct is not None:
        evidence.append(
            f"profiling made steps {unprofiled.overhead_pct:.0f} % slower: {unprofiled.profiled_step_ms:.2f} ms"
            f" profiled vs {unprofiled.step_ms_p50:.2f} ms unprofiled (medians over {unprofiled.profiled_steps} and"
            f" {unprofiled.reference_steps} steps); predictions are of the unprofiled training"
        )
    return evidence


def _num_workers_evidence(
    inputs: ModelInputs,
    predicted: list[Prediction],
    num_workers: int,
    bound: str | None,
    config: LoaderConfig | None,
    chosen_on_predictions: bool = True,
) -> list[str]:
    """The numbers behind the recommended num_workers (``chosen_on_predictions``: it is the fewest within CHOOSE_WITHIN
    of the best prediction; else the trials chose it, and their evidence says why)."""
    chosen = predicted[num_workers]
    over = f", {chosen.epoch_steps_per_s:.2f} steps/s over whole epochs" if chosen.epoch_steps_per_s is not None else ""
    evidence = [
        f"a batch costs {inputs.batch_ms:.2f} ms to produce ({inputs.batch_cpu_ms:.2f} ms CPU),"
        f" {inputs.batches_per_step:g} per step; the step itself (without data wait or waiting for a core) is"
        f" {inputs.consumer_ms:.2f} ms",
        f"num_workers={num_workers}: predicted {chosen.step_ms:.2f} ms/step ({chosen.steps_per_s:.2f}"
        f" steps/s{over})"
        + (f", within {CHOOSE_WITHIN:.0%} of the best prediction" if chosen_on_predictions else "")
        + (f"; bound by {bound}" if bound else ""),
    ]
    if inputs.handoff_ms > 0:
        evidence.append(
            f"receiving batches from workers costs the main process {inputs.handoff_ms:.2f} ms per step (hand-off)"
        )
    if inputs.usable_cores:
        evidence.append(
            f"{inputs.usable_cores} usable cores; main process needs ~{inputs.main_cpu_ms:.1f} core-ms per step"
        )
    recorded = config.num_workers if config else None
    if chosen_on_predictions:
        evidence += _contention_caution(inputs, predicted, num_workers, recorded)
    if recorded is not None and recorded > num_workers and recorded < len(predicted):
        evidence.append(
            f"num_workers={recorded} (as recorded) is predicted at {predicted[recorded].effective_steps_per_s:.2f}"
            f" steps/s: the {recorded - num_workers} extra worker(s) buy nothing and cost memory and CPU"
        )
    return evidence


def _contention_caution(
    inputs: ModelInputs, predicted: list[Prediction], num_workers: int, recorded: int | None
) -> list[str]:
    """A caution where predictions the choice compared (up to the recommended count and the usable cores) rest on the
    contention term, with the trials that measure them instead; none otherwise."""
    upto = max(num_workers, inputs.usable_cores or 0, recorded or 0)
    contended = [p.num_workers for p in predicted if p.bound == CONTENTION and p.num_workers <= upto]
    if not contended:
        return []
    counts = ",".join(str(n) for n in sorted({recorded or 0, num_workers, *contended[:3]}))
    threads = f"{inputs.training_threads:.0f}" if inputs.training_threads else "several"
    return [
        f"caution: the predictions at {_counts_text(contended)} rest on the model's contention term (their workers"
        f" share the cores with the training's {threads} busy threads, and hold back its parallel work by as much as"
        " the scheduler lets them, which a recording does not measure): the model's least certain predictions"
        f" (docs/validation.md#the-model-under-contention); measure them with dlprof record --try-workers {counts}"
    ]


def _counts_text(counts: list[int]) -> str:
    """``num_workers=1-4`` for more than two consecutive counts (sorted), else ``num_workers=1, 3``."""
    span = len(counts) > 2 and counts[-1] - counts[0] == len(counts) - 1
    return "num_workers=" + (f"{counts[0]}-{counts[-1]}" if span else ", ".join(map(str, counts)))
