"""Recommendations, each with the numbers from the run that justify it. Thresholds are named constants."""
from __future__ import annotations

from dataclasses import dataclass, field

from dlprof.advice.model import ModelInputs, Prediction, candidate_counts, memory_limit, predict
from dlprof.analysis.gpu import GpuStats
from dlprof.analysis.loader import LoaderStats
from dlprof.analysis.steps import StepBreakdown

# Input-bound verdicts, from TensorFlow's input-pipeline analyser: share of step time waiting for input.
HIGHLY_INPUT_BOUND_PCT = 20.0
MODERATELY_INPUT_BOUND_PCT = 5.0
#: Recommend the smallest num_workers predicted within this fraction of the best prediction.
WITHIN_BEST = 0.05
#: Workers may use at most this share of the RAM available when the run was recorded (the model,
#: optimizer state and the OS need the rest).
MEMORY_BUDGET_FRACTION = 0.5
#: Bursty supply: p90 wait at least this multiple of the mean wait ...
BURSTY_P90_OVER_MEAN = 2.0
#: ... and at least this share of the step, while average supply keeps up.
BURSTY_P90_PCT = 5.0
#: prefetch_factor to suggest for bursty supply (PyTorch's default is 2).
BURSTY_PREFETCH_FACTOR = 4
#: Fewer recorded steps than this make percentiles (and the bursty-wait rule) unreliable.
MIN_STEPS_FOR_PERCENTILES = 5
#: The tokenizer "dominates" loading above this share of a batch's wall time.
TOKENIZER_DOMINANT_PCT = 50.0


@dataclass(frozen=True)
class Advice:
    """The recommendation, its evidence and the predictions behind it. ``None`` means unknown or no change."""

    verdict: str  # "HIGHLY" | "MODERATELY" | "NOT" (input-bound)
    num_workers: int | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    bound: str | None
    predicted: list[Prediction]
    evidence: list[str]
    basis: list[str] = field(default_factory=list)  # what the advice rests on, and what was unknown


def verdict_of(data_wait_pct: float) -> str:
    if data_wait_pct > HIGHLY_INPUT_BOUND_PCT:
        return "HIGHLY"
    if data_wait_pct >= MODERATELY_INPUT_BOUND_PCT:
        return "MODERATELY"
    return "NOT"


def _model_inputs(
    steps: StepBreakdown, loader: LoaderStats | None, gpu: GpuStats | None, manifest: dict, batches_per_step: float,
    loads_in_main: bool | None, basis: list[str],
) -> ModelInputs | None:
    host = manifest.get("host") or {}
    cores = host.get("usable_cores")
    if cores is None:
        basis.append("usable cores unknown (no dlprof manifest): the CPU bound is left out")
    if loader is not None:
        batch_ms = max(0.0, loader.batch.mean_ms - loader.batch_runq_ms_mean)
        batch_cpu_ms = loader.batch_cpu_ms_mean
        basis.append("producer cost measured in the loader processes (dlprof spans)")
        handoff = _handoff_ms(loader, host, batches_per_step, basis)
    elif loads_in_main:
        # Without spans, a num_workers=0 run's data wait is the loading itself.
        batch_ms = steps.categories["data_wait"].mean_ms / batches_per_step
        batch_cpu_ms = batch_ms
        handoff = 0.0
        basis.append("no worker spans: producer cost taken from the data wait, assumed to be all CPU (record with dlprof record to measure it)")
    else:
        basis.append("no worker spans: what a batch costs to produce is unknown, so no num_workers can be predicted (record with dlprof record)")
        return None
    measured = manifest.get("main_process_cpu")
    # The step without data wait, less the time the training thread waited for a core: how long the
    # consumer takes on its own; contention for cores is the CPU bound's to model.
    runq = (measured or {}).get("runq_ms_per_step") or 0.0
    consumer = max(0.0, steps.consumer_ms - runq)
    if runq:
        basis.append(f"the training thread waited {runq:.2f} ms per step for a core: left out of the consumer's time")
    if measured:
        # Measured over the recorded steps; loading done in the main process is the producer's share.
        in_main = loader.batch_cpu_ms_mean * batches_per_step if (loader and loader.in_main_process) else 0.0
        main_cpu_ms = max(0.0, measured["cpu_ms_per_step"] - in_main)
        basis.append("main process CPU time measured per step")
    else:
        threads = 1 if gpu is not None else min(host.get("torch_threads") or cores or 1, cores or 1)
        main_cpu_ms = consumer * threads
        basis.append(f"main process CPU time not measured: assumed {threads} busy core(s) for the whole step")
    pss = [w.pss_mib_last for w in (loader.workers if loader else []) if w.worker >= 0 and w.pss_mib_last]
    if not pss:
        basis.append("worker memory unknown (no workers recorded): the memory bound is left out")
    return ModelInputs(
        consumer_ms=consumer, batches_per_step=batches_per_step, batch_ms=batch_ms, batch_cpu_ms=batch_cpu_ms,
        handoff_ms=handoff, usable_cores=cores, main_cpu_ms=main_cpu_ms,
        worker_pss_mib=sum(pss) / len(pss) if pss else None, available_ram_mib=host.get("ram_available_mib"),
    )  # fmt: skip


def _handoff_ms(loader: LoaderStats, host: dict, batches_per_step: float, basis: list[str]) -> float:
    """What receiving ready batches from workers costs the main process per step.

    Measured in a run with workers: the main process's waits for batches a worker had already
    collated (unpickling, fetching shared memory from the worker, whose GIL a busy worker holds). From
    a ``num_workers=0`` run, this machine's calibration (measured idle, so a lower bound under load).
    """
    if not loader.in_main_process and loader.wait:
        basis.append(f"hand-off to the main process measured in the run: {loader.wait.ready_ms_mean:.2f} ms per step")
        return loader.wait.ready_ms_mean
    calibration = host.get("handoff")
    if calibration and loader.tensors_per_batch:
        per_batch = calibration["per_batch_ms"] + calibration["per_tensor_ms"] * loader.tensors_per_batch
        basis.append(f"hand-off estimated from this machine's calibration: {per_batch:.2f} ms per batch of {loader.tensors_per_batch:g} tensors")
        return per_batch * batches_per_step
    basis.append("hand-off to the main process unknown: predictions with workers leave it out")
    return 0.0


def _choose(inputs: ModelInputs, predicted: list[Prediction], cpu_bound_loading: bool) -> tuple[int, str]:
    allowed = predicted
    limits = []
    memory_cap = memory_limit(inputs, MEMORY_BUDGET_FRACTION)
    if memory_cap is not None:
        allowed = [p for p in allowed if p.num_workers <= memory_cap]
        limits.append(("memory", memory_cap))
    if cpu_bound_loading and inputs.usable_cores:
        allowed = [p for p in allowed if p.num_workers <= inputs.usable_cores]
        limits.append(("cpu", inputs.usable_cores))
    best = min(p.step_ms for p in allowed)
    chosen = next(p for p in allowed if p.step_ms <= best * (1 + WITHIN_BEST))
    unconstrained = min(p.step_ms for p in predicted)
    if best > unconstrained * (1 + WITHIN_BEST):  # a limit, not the model, stopped us
        for name, cap in limits:
            if chosen.num_workers >= cap:
                return chosen.num_workers, name
    return chosen.num_workers, chosen.bound


def advise(
    steps: StepBreakdown, loader: LoaderStats | None, gpu: GpuStats | None, manifest: dict | None, batches_per_step: float,
    loads_in_main: bool | None,
) -> Advice:
    """Recommend DataLoader settings for the run behind these statistics.

    Args:
        loads_in_main: whether the run loaded batches in the main process (num_workers=0); None if unknown.
    """
    manifest = manifest or {}
    basis: list[str] = [] if manifest else ["no dlprof manifest: loader settings, cores and memory are unknown"]
    evidence: list[str] = []
    if len(steps.steps) < MIN_STEPS_FOR_PERCENTILES:
        basis.append(f"only {len(steps.steps)} step(s) recorded: p50/p90 say little; record more (dlprof record --active 20)")
    loader_config = manifest.get("loader") or {}
    step_ms, wait = steps.step.mean_ms, steps.categories["data_wait"]
    verdict = verdict_of(steps.data_wait_pct)
    evidence.append(
        f"data wait {wait.mean_ms:.2f} ms of a {step_ms:.2f} ms step ({steps.data_wait_pct:.1f} %): "
        f"{verdict} input-bound (HIGHLY > {HIGHLY_INPUT_BOUND_PCT:g} %, MODERATELY {MODERATELY_INPUT_BOUND_PCT:g}-{HIGHLY_INPUT_BOUND_PCT:g} %)"
    )
    inputs = _model_inputs(steps, loader, gpu, manifest, batches_per_step, loads_in_main, basis)
    predicted: list[Prediction] = []
    num_workers = bound = None
    if inputs is not None:
        predicted = [predict(inputs, n) for n in candidate_counts(inputs)]
        cpu_bound = loader.bound == "cpu" if loader else True
        num_workers, bound = _choose(inputs, predicted, cpu_bound)
        evidence.append(
            f"a batch costs {inputs.batch_ms:.2f} ms to produce ({inputs.batch_cpu_ms:.2f} ms CPU), "
            f"{inputs.batches_per_step:g} per step; the step itself (without data wait or waiting for a core) is {inputs.consumer_ms:.2f} ms"
        )
        chosen = predicted[num_workers]
        evidence.append(
            f"num_workers={num_workers}: predicted {chosen.step_ms:.2f} ms/step ({chosen.steps_per_s:.2f} steps/s), "
            f"within {WITHIN_BEST:.0%} of the best prediction; bound by {bound}"
        )
        if inputs.handoff_ms > 0:
            evidence.append(f"the main process waited {inputs.handoff_ms:.2f} ms per step for batches already produced (hand-off to the main process)")
        if inputs.usable_cores:
            evidence.append(f"{inputs.usable_cores} usable cores; main process needs ~{inputs.main_cpu_ms:.1f} core-ms per step")
        recorded = loader_config.get("num_workers")
        if recorded is not None and recorded > num_workers:
            evidence.append(
                f"num_workers={recorded} (as recorded) is predicted at {predicted[min(recorded, len(predicted) - 1)].step_ms:.2f} ms/step: "
                f"the {recorded - num_workers} extra worker(s) buy nothing and cost memory and CPU"
            )
    if loader is not None:
        evidence.append(
            f"per batch: fetch {loader.fetch.mean_ms:.2f} ms, tokenizer {loader.tokenize.mean_ms:.2f} ms, collate {loader.collate.mean_ms:.2f} ms "
            f"(CPU/wall {loader.cpu_fraction:.2f}: {loader.bound}-bound)"
        )
    pin_memory = _pin_memory(gpu, loader_config, evidence)
    prefetch = _prefetch_factor(steps, inputs, num_workers, evidence)
    persistent = _persistent_workers(manifest, loader_config, num_workers, evidence)
    if loader is not None and loader.batch.mean_ms > 0 and 100 * loader.tokenize.mean_ms / loader.batch.mean_ms > TOKENIZER_DOMINANT_PCT:
        evidence.append(
            f"the tokenizer takes {loader.tokenize.mean_ms:.2f} of {loader.batch.mean_ms:.2f} ms per batch "
            f"({100 * loader.tokenize.mean_ms / loader.batch.mean_ms:.0f} %): pre-tokenize the dataset once (e.g. datasets.map) and load token ids"
        )
    return Advice(verdict, num_workers, pin_memory, prefetch, persistent, bound, predicted, evidence, basis)


def _pin_memory(gpu: GpuStats | None, config: dict, evidence: list[str]) -> bool | None:
    if gpu is None:
        if config.get("pin_memory"):
            evidence.append("pin_memory=True has no effect without a GPU: turn it off")
            return False
        return None
    if gpu.h2d_pageable_copies:
        evidence.append(
            f"{gpu.h2d_pageable_copies} of {gpu.h2d_copies} host-to-device copies are from pageable memory "
            f"({gpu.h2d.mean_ms:.2f} ms, {gpu.h2d_mib_per_step:.1f} MiB per step): pin_memory=True makes them asynchronous and faster"
        )
        return True
    return True if gpu.h2d_pinned_copies else None


def _prefetch_factor(steps: StepBreakdown, inputs: ModelInputs | None, num_workers: int | None, evidence: list[str]) -> int | None:
    wait = steps.categories["data_wait"]
    if not num_workers or inputs is None or wait.mean_ms <= 0:
        return None
    supply_ok = inputs.batches_per_step * inputs.batch_ms / num_workers <= inputs.consumer_ms
    bursty = wait.p90_ms >= BURSTY_P90_OVER_MEAN * wait.mean_ms and 100 * wait.p90_ms / steps.step.mean_ms >= BURSTY_P90_PCT
    if supply_ok and bursty:
        evidence.append(
            f"waits are bursty (p90 {wait.p90_ms:.2f} ms vs mean {wait.mean_ms:.2f} ms) although supply keeps up on average: "
            f"prefetch_factor={BURSTY_PREFETCH_FACTOR} buffers more batches per worker"
        )
        return BURSTY_PREFETCH_FACTOR
    return None


def _persistent_workers(manifest: dict, config: dict, num_workers: int | None, evidence: list[str]) -> bool | None:
    if not num_workers:
        return None
    starts = manifest.get("workers") or []
    epochs = {w["epoch"] for w in starts}
    if config.get("persistent_workers") is False and len(epochs) > 1:
        evidence.append(f"workers were started {len(starts)} times over {len(epochs)} epochs: persistent_workers=True keeps them")
        return True
    if config.get("persistent_workers") is False and (config.get("iterations") or 0) > 1:
        evidence.append(f"the loader was iterated {config['iterations']} times, restarting its workers each time: persistent_workers=True keeps them")
        return True
    return None
