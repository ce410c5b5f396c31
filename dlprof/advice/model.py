"""The throughput model: predicted step time for every ``num_workers`` from one recorded run.

A step cannot be faster than any of three bounds:

* the consumer: the step without data wait, ``consumer_ms`` (forward, backward, optimizer, ...);
* the producers: ``n`` workers each take ``batch_ms`` (its CPU time plus the time it blocks, without
  the time it waited for a core) per batch, so they supply one every ``batch_ms / n``;
* the CPU: the main process's demand per step plus the workers' CPU time per step, spread over the
  usable cores; and where the training's own threads keep cores busy, the contention term: workers beyond the
  cores it leaves free share cores with its threads, and a worker's CPU burst holds back a whole parallel region
  (:func:`contended_ms`).

With workers, the main process also pays the hand-off of each batch (unpickling, fetching its shared
memory: this machine's calibration), which lengthens the consumer. With ``num_workers=0`` the main
process loads each batch itself: ``consumer_ms + batch_ms``.

The consumer and the main process's CPU time are the unprofiled ones (reference steps) when the run
has them, freed of the contention they were measured under when recorded with workers (:func:`uncontended`), and
the run's own unprofiled step anchors the predictions of its regime. Over whole epochs,
workers that are not persistent restart at every epoch boundary: measured there, else estimated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dlprof.results.advice import Prediction

#: Candidates are predicted up to at least this many workers (and twice the usable cores).
MIN_CANDIDATES = 8
#: Never predict beyond this many workers (DataLoader start-up and memory make more impractical).
MAX_CANDIDATES = 64
#: No predicted step is shorter than a trace can resolve (1 µs): a consumer and producers measured at 0
#: would otherwise predict infinitely many steps per second.
MIN_STEP_MS = 0.001
#: Halvings that find the uncontended consumer (:func:`uncontended`): to 2**-30 of it.
UNCONTENDED_ITERATIONS = 30
#: The bound of a step set by the contention term (:func:`contended_ms`): the workers share the cores with the
#: training's threads. The least certain of the bounds: how much a busy worker holds back a parallel region is the
#: scheduler's, which a recording does not measure (docs/validation.md#the-model-under-contention).
CONTENTION = "contention"


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
    #: Cores the training keeps busy while it computes (its CPU over the consumer's wall, at most the usable cores):
    #: workers beyond the cores it leaves free share cores with its threads (:func:`contended_ms`). None: not known,
    #: no contention term.
    training_threads: float | None = None
    #: Over whole epochs, the predictions of the recorded regime times this: the whole epochs timed at the recorded
    #: count over the model's whole-epoch rate there (:func:`epoch_anchor`); 1 where none were timed.
    epoch_factor: float = 1.0
    #: A launch without the profiler timed the reference steps (``--plain-launch``): every prediction times its speed
    #: over the recording's there, steady (``launch_factor``) and over whole epochs (``epoch_launch_factor``); 1 without
    #: one. Applied last, after every anchor: the predictions become the plain launch's.
    launch_factor: float = 1.0
    epoch_launch_factor: float = 1.0

    @property
    def anchor(self) -> tuple[int, float] | None:
        """The recorded ``num_workers`` and its measured unprofiled step, ms, to which the predictions of its regime
        are anchored (:func:`predict`); None where either is unknown."""
        if self.recorded_workers is None or not self.measured_step_ms:
            return None
        return self.recorded_workers, self.measured_step_ms


def shared_cores(cores: int, threads: int, workers: int) -> tuple[float, float]:
    """``workers`` busy single-threaded workers and the training's ``threads`` busy threads on ``cores`` cores: the
    training's speed (1: as alone) and the workers' CPU per ms of wall (in cores).

    Workers fill the cores the training leaves free first; the rest share the training's cores evenly, each thread
    on a core with ``q`` workers running ``1 / (1 + q)`` of the time. A parallel region advances only while all its
    threads run, which three pictures of the scheduler price differently:

    * in step (threads waiting at a region's barrier are woken ahead of the workers): the least of their shares;
    * independently: the product of their shares;
    * all at once: before they sleep, threads waiting at a barrier spin on their cores (OpenMP's default wait
      policy), so they stay runnable and every runnable thread holds a core for an even share of the time; the region
      advances only while all its threads hold one at once, ``C(workers, cores - threads) / C(threads + workers,
      cores)`` of the time.

    The speed is the geometric mean of the three (equal for one thread on a core of its own): measured against the
    claim check's trials, the first two alone left the contention of two busy workers too small (a consumer recorded
    beside them was freed to 23-24 ms where the training alone took 16-17) and the third alone too large (11-12 ms);
    the three together gave 18-19 (docs/validation.md#all-threads-at-once).
    """
    free = cores - threads
    overflow = workers - free
    if overflow <= 0:
        return 1.0, float(workers)
    low, extra = divmod(overflow, threads)
    independent = (1 / (1 + low)) ** (threads - extra) * (1 / (2 + low)) ** extra
    in_step = 1 / (2 + low) if extra else 1 / (1 + low)
    all_at_once = math.comb(workers, max(0, free)) / math.comb(threads + workers, cores)
    speed = (independent * in_step * all_at_once) ** (1 / 3)
    return speed, free + (threads - extra) * low / (1 + low) + extra * (low + 1) / (low + 2)


def _contended_at(inputs: ModelInputs, num_workers: int, cores: int, threads: int) -> float:
    speed, workers_rate = shared_cores(cores, threads, num_workers)
    consumer = inputs.consumer_ms + inputs.handoff_ms
    work = inputs.batches_per_step * inputs.batch_cpu_ms + inputs.worker_send_ms
    if speed >= 1 or work <= 0:
        return consumer
    computing = consumer / speed  # the training's compute with every worker running beside it
    if workers_rate * computing < work:
        # The training waits for the rest of the batches, made on the cores it leaves.
        return computing + (work - workers_rate * computing) / min(num_workers, cores)
    # The workers keep up. A worker is sent its next batch only when the training takes one (prefetching), so in a
    # steady step only as many are busy as its batches need: the fewest whose CPU fits inside the compute, busy part of
    # the step, one fewer the rest; the others wait for work, neither helping nor slowing the training.
    busy = next(n for n in range(1, num_workers + 1) if _fits(consumer, work, *shared_cores(cores, threads, n)))
    fewer_speed, fewer_rate = shared_cores(cores, threads, busy - 1)
    busy_speed, busy_rate = shared_cores(cores, threads, busy)
    # The share of the step with ``busy`` workers at which the training's compute and the batches' CPU end together.
    share = (work * fewer_speed - consumer * fewer_rate) / (
        consumer * (busy_rate - fewer_rate) + work * (fewer_speed - busy_speed)
    )
    return consumer / (fewer_speed + share * (busy_speed - fewer_speed))


def _fits(consumer_ms: float, work_ms: float, speed: float, workers_rate: float) -> bool:
    """Whether workers running at ``workers_rate`` beside the training's compute (slowed to ``speed``) make its
    batches' CPU time ``work_ms`` within it."""
    return workers_rate * consumer_ms >= work_ms * speed


def contended_ms(inputs: ModelInputs, num_workers: int) -> float | None:
    """The step with ``num_workers`` workers sharing the cores with the training's threads (:func:`shared_cores`):
    the training's compute slowed while the workers' CPU time runs beside it, and the batches it still waits for.
    Workers that keep up are no more busy at once than its batches need (the rest wait for work), so beyond that count
    the step stays as it is. None without workers, where the cores or the training's threads are unknown, or where the
    training keeps at most one core busy (no parallel region to hold back: the cores' bound in :func:`_raw` covers a
    single thread).

    A fractional thread count (the training's CPU over its wall) is interpolated between its whole neighbours, from
    one thread's unslowed consumer up to two threads' term.
    """
    cores, threads = inputs.usable_cores, inputs.training_threads
    if not num_workers or not cores or not threads or min(threads, cores) <= 1:
        return None
    threads = min(threads, float(cores))
    low = math.floor(threads)
    step = inputs.consumer_ms + inputs.handoff_ms if low == 1 else _contended_at(inputs, num_workers, cores, low)
    if threads > low:
        step += (threads - low) * (_contended_at(inputs, num_workers, cores, low + 1) - step)
    return step


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
        contended = contended_ms(inputs, num_workers)
        if contended is not None and contended > bounds["cpu"]:
            bounds[CONTENTION] = contended
    bound = max(bounds, key=bounds.__getitem__)
    return bounds[bound], bound


def uncontended(inputs: ModelInputs) -> tuple[ModelInputs, float]:
    """``inputs`` recorded with workers, its consumer and main-process CPU freed of the contention they were measured
    under; and the factor they were scaled by (1: unchanged).

    The training's own time, measured beside busy workers, includes the parallel regions they held back. The factor
    is the one for which the contention term (:func:`contended_ms`) reproduces the measured step at the recorded count;
    where that term does not bind there, or cannot reach the measured step, the inputs are left as they are.
    """
    recorded, measured = inputs.recorded_workers, inputs.measured_step_ms
    if not recorded or not measured:
        return inputs, 1.0
    raw, _ = _raw(inputs, recorded)
    if raw <= measured or contended_ms(inputs, recorded) != raw or raw <= inputs.consumer_ms + inputs.handoff_ms:
        return inputs, 1.0

    def step(factor: float) -> float:
        scaled = replace(inputs, consumer_ms=inputs.consumer_ms * factor, main_cpu_ms=inputs.main_cpu_ms * factor)
        return _raw(scaled, recorded)[0]

    if step(0.0) >= measured:
        return inputs, 1.0
    low, high = 0.0, 1.0
    for _ in range(UNCONTENDED_ITERATIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if step(middle) < measured else (low, middle)
    factor = (low + high) / 2
    return replace(inputs, consumer_ms=inputs.consumer_ms * factor, main_cpu_ms=inputs.main_cpu_ms * factor), factor


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
    fixed cost added on top. Over whole epochs, the whole epochs it timed anchor them alike (``epoch_factor``). A
    plain launch's speed over the same steps scales them all last (``launch_factor``, ``epoch_launch_factor``).
    """
    step_ms, bound = _raw(inputs, num_workers)
    anchor = inputs.anchor
    recorded_regime = anchor is not None and (num_workers == 0) == (anchor[0] == 0)
    if anchor is not None and recorded_regime:
        recorded, measured_ms = anchor
        at_recorded, _ = _raw(inputs, recorded)
        if at_recorded > 0:
            step_ms *= measured_ms / at_recorded
    step_ms = max(step_ms, MIN_STEP_MS)
    restart = restart_ms(inputs, num_workers)
    epoch_rate = None
    if inputs.epoch is not None:
        steps = inputs.epoch.steps_per_epoch
        epoch_rate = 1000 * steps / (steps * step_ms + restart) if steps > 0 else None
    if epoch_rate is not None and recorded_regime:
        epoch_rate *= inputs.epoch_factor
    step_ms /= inputs.launch_factor
    if epoch_rate is not None:
        epoch_rate *= inputs.epoch_launch_factor
    return Prediction(
        num_workers=num_workers,
        step_ms=step_ms,
        steps_per_s=1000 / step_ms,
        bound=bound,
        epoch_steps_per_s=epoch_rate,
        restart_ms=restart,
    )


def epoch_anchor(inputs: ModelInputs, measured_steps_per_s: float) -> ModelInputs:
    """``inputs`` with the whole epochs timed at the recorded count (``measured_steps_per_s``) anchoring the
    whole-epoch predictions of its regime: what the steady step and the restarts miss over an epoch (its boundary's
    other costs, the batches its steps drew) is a factor, as the steady step's anchor is. Unchanged where the recorded
    count, the epoch length or the measured rate is unknown."""
    if inputs.anchor is None or measured_steps_per_s <= 0:
        return inputs
    alone = replace(inputs, epoch_factor=1.0, launch_factor=1.0, epoch_launch_factor=1.0)
    modelled = predict(alone, inputs.anchor[0]).epoch_steps_per_s
    if not modelled:
        return inputs
    return replace(inputs, epoch_factor=measured_steps_per_s / modelled)


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
