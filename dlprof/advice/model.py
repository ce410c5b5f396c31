"""The throughput model: predicted step time for every ``num_workers`` from one recorded run.

A step cannot be faster than any of three bounds:

* the consumer: the step without data wait, ``consumer_ms`` (forward, backward, optimizer, ...);
* the producers: ``n`` workers each take ``batch_ms`` (its CPU time plus the time it blocks, without
  the time it waited for a core) per batch, so they supply one every ``batch_ms / n``;
* the CPU: the main process's demand per step plus the workers' CPU time per step, spread over the
  usable cores.

With workers, the main process also pays the hand-off of each batch (unpickling, fetching its shared
memory: this machine's calibration), which lengthens the consumer. With ``num_workers=0`` the main
process loads each batch itself: ``consumer_ms + batch_ms``.

The consumer and the main process's CPU time are the unprofiled ones (reference steps) when the run
has them, and the run's own unprofiled step anchors the predictions of its regime. Over whole epochs,
workers that are not persistent restart at every epoch boundary: measured there, else estimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlprof.results.advice import Prediction

#: Candidates are predicted up to at least this many workers (and twice the usable cores).
MIN_CANDIDATES = 8
#: Never predict beyond this many workers (DataLoader start-up and memory make more impractical).
MAX_CANDIDATES = 64
#: No predicted step is shorter than a trace can resolve (1 µs): a consumer and producers measured at 0
#: would otherwise predict infinitely many steps per second.
MIN_STEP_MS = 0.001


@dataclass(frozen=True, kw_only=True)
class EpochModel:
    """What an epoch boundary costs with workers that restart (``persistent_workers=False``)."""

    steps_per_epoch: float
    persistent_workers: bool
    restart_measured_ms: float | None  # measured at the recorded count (after start-up)
    startup_fixed_ms: float | None  # this machine's calibration: fixed + n * per_worker
    startup_per_worker_ms: float | None
    #: A run without workers: what forking once slowed the training's next steps (the fork probe).
    fork_cost_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class ModelInputs:
    """What the model needs from a run (ms per step or per batch); consumer and CPU times are unprofiled when known."""

    consumer_ms: float
    batches_per_step: float
    batch_ms: float  # uncontended wall time per batch in one producer: CPU + blocking
    batch_cpu_ms: float
    handoff_ms: float  # per step, with workers: the main process receiving ready batches
    usable_cores: int | None
    main_cpu_ms: float  # CPU time (core-ms) the main process needs per step, loading excluded
    worker_pss_mib: float | None
    available_ram_mib: float | None
    recorded_workers: int | None = None
    #: The unprofiled step measured at ``recorded_workers`` (reference steps): predictions of that regime are anchored
    #: to it.
    measured_step_ms: float | None = None
    #: The main process's measured CPU already includes the hand-off (recorded with workers).
    cpu_includes_handoff: bool = True
    epoch: EpochModel | None = None
    #: Per step with workers: the workers' CPU to send batches (shared memory; not in their spans).
    worker_send_ms: float = 0.0


def _raw(inputs: ModelInputs, num_workers: int) -> tuple[float, str]:
    per_step_loading = inputs.batches_per_step * inputs.batch_ms
    if num_workers == 0:
        return inputs.consumer_ms + per_step_loading, "main process"
    # The hand-off is the main process's own work: it lengthens the consumer's chain, and only that.
    bounds = {"consumer": inputs.consumer_ms + inputs.handoff_ms, "loader": per_step_loading / num_workers}
    if inputs.usable_cores:
        handoff_cpu = 0.0 if inputs.cpu_includes_handoff else inputs.handoff_ms
        workers_cpu = inputs.batches_per_step * inputs.batch_cpu_ms + inputs.worker_send_ms
        bounds["cpu"] = (inputs.main_cpu_ms + handoff_cpu + workers_cpu) / inputs.usable_cores
    bound = max(bounds, key=bounds.__getitem__)
    return bounds[bound], bound


def restart_ms(inputs: ModelInputs, num_workers: int) -> float:
    """What restarting ``num_workers`` workers costs per epoch (0 without workers or with persistent ones)."""
    epoch = inputs.epoch
    if epoch is None or num_workers == 0 or epoch.persistent_workers:
        return 0.0
    per_worker = epoch.startup_per_worker_ms or 0.0
    if epoch.restart_measured_ms is not None and inputs.recorded_workers:
        return max(0.0, epoch.restart_measured_ms + per_worker * (num_workers - inputs.recorded_workers))
    # Not seen: start-up and shut-down calibrated on this machine, the first batch made from scratch, and
    # what forking costs the training process's next steps (copy-on-write), measured by the fork probe.
    return (
        (epoch.startup_fixed_ms or 0.0)
        + per_worker * num_workers
        + inputs.batches_per_step * inputs.batch_ms
        + (epoch.fork_cost_ms or 0.0)
    )


def predict(inputs: ModelInputs, num_workers: int) -> Prediction:
    """Predicted step time with ``num_workers`` DataLoader workers.

    The run's own measured unprofiled step anchors the predictions of its regime (with or without
    workers): whatever the bounds miss there (contention, the hand-off under load) is a factor, not a
    fixed cost added on top.
    """
    step_ms, bound = _raw(inputs, num_workers)
    recorded = inputs.recorded_workers
    if inputs.measured_step_ms and recorded is not None and (num_workers == 0) == (recorded == 0):
        at_recorded, _ = _raw(inputs, recorded)
        if at_recorded > 0:
            step_ms *= inputs.measured_step_ms / at_recorded
    step_ms = max(step_ms, MIN_STEP_MS)
    restart = restart_ms(inputs, num_workers)
    epoch_rate = None
    if inputs.epoch is not None:
        steps = inputs.epoch.steps_per_epoch
        epoch_rate = 1000 * steps / (steps * step_ms + restart) if steps > 0 else None
    return Prediction(
        num_workers=num_workers,
        step_ms=step_ms,
        steps_per_s=1000 / step_ms,
        bound=bound,
        epoch_steps_per_s=epoch_rate,
        restart_ms=restart,
    )


def candidate_counts(inputs: ModelInputs) -> list[int]:
    """0 up to where one more worker can no longer help (I/O-bound loaders may need many)."""
    upper = max(MIN_CANDIDATES, 2 * (inputs.usable_cores or 0))
    if inputs.consumer_ms > 0:
        upper = max(upper, math.ceil(inputs.batches_per_step * inputs.batch_ms / inputs.consumer_ms) + 1)
    return list(range(min(upper, MAX_CANDIDATES) + 1))


def memory_limit(inputs: ModelInputs, budget_fraction: float) -> int | None:
    """Most workers whose memory (PSS each) fits in ``budget_fraction`` of the available RAM."""
    if not inputs.worker_pss_mib or not inputs.available_ram_mib:
        return None
    return max(1, int(inputs.available_ram_mib * budget_fraction // inputs.worker_pss_mib))
