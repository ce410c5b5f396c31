"""The throughput model: predicted step time for every ``num_workers`` from one recorded run.

A step cannot be faster than any of three bounds (DESIGN.md):

* the consumer: the step without data wait, ``consumer_ms`` (forward, backward, optimizer, ...);
* the producers: ``n`` workers each take ``batch_ms`` (its CPU time plus the time it blocks, without
  the time it waited for a core) per batch, so they supply one every ``batch_ms / n``;
* the CPU: the main process's demand per step plus the workers' CPU time per step, spread over the
  usable cores.

With workers, each step also pays the hand-off measured in the run (the main process waiting in
``__next__`` for a batch that was already produced: unpickling, the worker's GIL). With
``num_workers=0`` the main process loads each batch itself: ``consumer_ms + batch_ms``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: Candidates are predicted up to at least this many workers (and twice the usable cores).
MIN_CANDIDATES = 8
#: Never predict beyond this many workers (DataLoader start-up and memory make more impractical).
MAX_CANDIDATES = 64


@dataclass(frozen=True)
class ModelInputs:
    """What the model needs from a run (ms per step or per batch)."""

    consumer_ms: float
    batches_per_step: float
    batch_ms: float  # uncontended wall time per batch in one producer: CPU + blocking
    batch_cpu_ms: float
    handoff_ms: float  # per step, with workers
    usable_cores: int | None
    main_cpu_ms: float  # CPU time (core-ms) the main process needs per step, loading excluded
    worker_pss_mib: float | None
    available_ram_mib: float | None


@dataclass(frozen=True)
class Prediction:
    """Predicted speed at one ``num_workers``, and the bound that sets it."""

    num_workers: int
    step_ms: float
    steps_per_s: float
    bound: str  # "consumer" | "loader" | "cpu" | "main process"


def predict(inputs: ModelInputs, num_workers: int) -> Prediction:
    """Predicted step time with ``num_workers`` DataLoader workers."""
    per_step_loading = inputs.batches_per_step * inputs.batch_ms
    if num_workers == 0:
        step_ms, bound = inputs.consumer_ms + per_step_loading, "main process"
    else:
        bounds = {"consumer": inputs.consumer_ms, "loader": per_step_loading / num_workers}
        if inputs.usable_cores:
            bounds["cpu"] = (inputs.main_cpu_ms + inputs.batches_per_step * inputs.batch_cpu_ms) / inputs.usable_cores
        bound = max(bounds, key=bounds.get)
        step_ms = bounds[bound] + inputs.handoff_ms
    return Prediction(num_workers, step_ms, 1000 / step_ms if step_ms > 0 else math.inf, bound)


def candidate_counts(inputs: ModelInputs) -> list[int]:
    """0 up to where one more worker can no longer help (I/O-bound loaders may need many)."""
    upper = max(MIN_CANDIDATES, 2 * (inputs.usable_cores or 0))
    if inputs.consumer_ms > 0:
        upper = max(upper, math.ceil(inputs.batches_per_step * inputs.batch_ms / inputs.consumer_ms) + 1)
    return list(range(0, min(upper, MAX_CANDIDATES) + 1))


def memory_limit(inputs: ModelInputs, budget_fraction: float) -> int | None:
    """Most workers whose memory (PSS each) fits in ``budget_fraction`` of the available RAM."""
    if not inputs.worker_pss_mib or not inputs.available_ram_mib:
        return None
    return max(1, int(inputs.available_ram_mib * budget_fraction // inputs.worker_pss_mib))
