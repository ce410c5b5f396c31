"""What the throughput model needs from a run (:class:`~dlprof.advice.model.ModelInputs`): what a batch costs to
produce and to hand over, what the step costs without its data wait, the machine's share of cores and memory, and the
epoch's worker restarts; each input with the line of the report's basis that says what it rests on.

:mod:`dlprof.advice.rules` predicts from these and chooses the settings.
"""

from __future__ import annotations

from dataclasses import replace

from dlprof.advice.model import EpochModel, ModelInputs, epoch_anchor, uncontended
from dlprof.analysis.unprofiled import VOLATILE_FAULTS, VOLATILE_SYS_PCT
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, Host, Manifest
from dlprof.results.analysis import GpuStats, LoaderStats, StepBreakdown, UnprofiledStats

#: The whole-epoch anchor is named in the basis where it moves the predictions by this much or more, %.
EPOCH_ANCHOR_SHOWN_PCT = 1.0


def model_inputs(
    steps: StepBreakdown,
    loader: LoaderStats | None,
    gpu: GpuStats | None,
    manifest: Manifest | None,
    batches_per_step: float,
    loads_in_main: bool | None,
    unprofiled: UnprofiledStats | None,
    basis: list[str],
) -> ModelInputs | None:
    """What the throughput model needs from this run; None when what a batch costs is unknown. Says in ``basis``
    what each input rests on."""
    host = manifest.host if manifest else None
    cores, ram_mib = _share_of_machine(manifest, basis)
    producer = _producer(steps, loader, host, batches_per_step, loads_in_main, unprofiled, basis)
    if producer is None:
        return None
    batch_ms, batch_cpu_ms, handoff = producer
    consumer, main_cpu_ms = _consumer(steps, loader, gpu, manifest, cores, batches_per_step, unprofiled, basis)
    _window_after_effect(unprofiled, basis)
    pss = [w.pss_mib_last for w in (loader.workers if loader else []) if w.worker >= 0 and w.pss_mib_last]
    if not pss:
        basis.append("worker memory unknown (no workers recorded): the memory bound is left out")
    config = manifest.loader if manifest else None
    recorded = config.num_workers if config else (0 if loads_in_main else None)
    inputs = ModelInputs(
        consumer_ms=consumer,
        batches_per_step=batches_per_step,
        batch_ms=batch_ms,
        batch_cpu_ms=batch_cpu_ms,
        handoff_ms=handoff,
        usable_cores=cores,
        main_cpu_ms=main_cpu_ms,
        worker_pss_mib=sum(pss) / len(pss) if pss else None,
        available_ram_mib=ram_mib,
        recorded_workers=recorded,
        measured_step_ms=unprofiled.step_ms if unprofiled else None,
        cpu_includes_handoff=bool(recorded),
        epoch=_epoch_model(unprofiled, host, basis),
        worker_send_ms=_worker_send_ms(loader, host, batches_per_step),
        training_threads=_training_threads(consumer, main_cpu_ms - (handoff if recorded else 0.0), host, cores, basis),
    )
    _shared_cores_after_effect(inputs, unprofiled, basis)
    freed, factor = uncontended(inputs)
    if factor < 1:
        basis.append(
            f"the consumer measured beside {recorded} busy worker(s) ({consumer:.1f} ms) includes the parallel work"
            f" they held back: {freed.consumer_ms:.1f} ms on cores of its own, the time with which the contention term"
            " gives the measured step"
        )
    return _plain_launch(_anchor_epochs(freed, unprofiled, basis), unprofiled, basis)


def _plain_launch(inputs: ModelInputs, unprofiled: UnprofiledStats | None, basis: list[str]) -> ModelInputs:
    """``inputs`` scaled to the plain launch's speed over the reference steps (``dlprof record --plain-launch``):
    what the recording changed in them is measured, and the predictions become what the training gets launched on
    its own. Says so in ``basis``, with the factors."""
    plain = unprofiled.plain_launch if unprofiled else None
    if plain is None:
        return inputs
    factor = plain.plain_steps_per_s / plain.recorded_steps_per_s
    epoch_factor = factor
    # The speeds themselves are on the report's line beside the unprofiled speed; the basis names what they do.
    said = f"every prediction is scaled to a plain launch of the same command: x{factor:.3f} on the steady steps"
    if plain.plain_epoch_steps_per_s and plain.recorded_epoch_steps_per_s:
        epoch_factor = plain.plain_epoch_steps_per_s / plain.recorded_epoch_steps_per_s
        said += f", x{epoch_factor:.3f} over whole epochs"
    basis.append(said + " (what your training gets launched without dlprof)")
    return replace(inputs, launch_factor=factor, epoch_launch_factor=epoch_factor)


def _anchor_epochs(inputs: ModelInputs, unprofiled: UnprofiledStats | None, basis: list[str]) -> ModelInputs:
    """``inputs`` with the whole epochs timed after the window anchoring the whole-epoch predictions of the recorded
    regime (:func:`~dlprof.advice.model.epoch_anchor`); says so in ``basis`` where that moves them by 1 % or more."""
    whole = unprofiled.epoch.whole_epoch_speed if unprofiled and unprofiled.epoch else None
    if whole is None or inputs.anchor is None:
        return inputs
    anchored = epoch_anchor(inputs, whole.steps_per_s)
    moved_pct = 100 * (anchored.epoch_factor - 1)
    if abs(moved_pct) >= EPOCH_ANCHOR_SHOWN_PCT:
        recorded = inputs.anchor[0]
        modelled = whole.steps_per_s / anchored.epoch_factor  # the model's own rate there, as epoch_anchor found it
        basis.append(
            f"over whole epochs the predictions at {'0' if recorded == 0 else '1 or more'} workers are anchored to the"
            f" {whole.steps} steps of whole epochs timed at {recorded} ({whole.steps_per_s:.2f} steps/s, where the"
            f" steady step and the restarts give {modelled:.2f}): {moved_pct:+.1f} %"
        )
    return anchored


def _window_after_effect(unprofiled: UnprofiledStats | None, basis: list[str]) -> None:
    """Says in ``basis`` what the profiler window changed in the main process: the kernel time of its page faults per
    step before it (the level every step kept: start-up's one-off faults are no level a fresh launch keeps) and after
    it (the reference steps), when the window lowered it by a share of the step that matters.

    A window's freed buffers raise glibc malloc's thresholds for the rest of the process, so the reference steps, the
    trials and the predictions calibrated on them may run faster than a fresh launch of the same training, which
    keeps the faults of the steps before the window. The kernel time is the measure: the steps' own times before the
    window are too few, and of batches too different, to compare.
    """
    faults = unprofiled.page_faults if unprofiled else None
    saved = faults.window_saved_ms if faults else None
    if unprofiled is None or faults is None or saved is None or unprofiled.step_ms <= 0:
        return
    if unprofiled.plain_launch is not None:  # measured instead (:func:`_plain_launch`)
        return
    saved_pct = 100 * saved / unprofiled.step_ms
    if saved_pct < VOLATILE_SYS_PCT or (faults.before_faults_per_step or 0) < VOLATILE_FAULTS:
        return
    basis.append(
        f"before the profiler window the main process took at least {faults.before_faults_per_step:,.0f} page faults"
        f" and {faults.before_sys_ms:.1f} ms of kernel time in each of {faults.before_steps} unprofiled steps, after"
        f" it {faults.faults_per_step:,.0f} and {faults.sys_ms:.1f} ms a step: the reference steps, the trials and"
        f" these predictions may run up to {saved_pct:.0f} % ({saved:.1f} ms a step) faster than a fresh launch of this"
        " training, in which glibc's malloc keeps the faults of the steps before the window (--plain-launch measures"
        " it)"
    )


def _shared_cores_after_effect(inputs: ModelInputs, unprofiled: UnprofiledStats | None, basis: list[str]) -> None:
    """Says in ``basis`` that the reference steps may run below a plain launch: recorded beside workers that share
    every core with the training's threads, the regime in which dlprof's own checks found the process after a profiler
    window training slower than plain launches of it (docs/validation.md). No recording measures by how much: that
    takes a launch without dlprof."""
    threads, cores = inputs.training_threads, inputs.usable_cores
    if unprofiled is None or not inputs.recorded_workers or threads is None or not cores or threads < cores:
        return
    if unprofiled.plain_launch is not None:  # measured instead (:func:`_plain_launch`)
        return
    basis.append(
        f"the reference steps ran after the profiler window, beside {inputs.recorded_workers} worker(s) sharing every"
        " core with the training's threads: in dlprof's own checks such a process trained a few per cent slower than"
        " plain launches of the same training, more in the epochs further from the window (an after-effect of the"
        " window that dlprof cannot remove), so your training launched without dlprof may run faster than the measured"
        " speed and these predictions; record with --plain-launch to measure by how much"
    )


def _training_threads(
    consumer_ms: float, cpu_ms: float, host: Host | None, cores: int | None, basis: list[str]
) -> float | None:
    """The cores the training keeps busy while it computes: its CPU over the consumer's wall, rounded (a stray thread
    beside one busy one is no parallel region), at most its intra-op threads (torch's) and the usable cores; None
    where the cores or the consumer are unknown."""
    if not cores or consumer_ms <= 0:
        return None
    ratio = cpu_ms / consumer_ms
    threads = float(max(1, min(round(ratio), cores, (host.torch_threads if host else None) or cores)))
    if threads <= 1:
        return threads  # one busy thread: no parallel region for a worker to hold back
    free = cores - threads
    who = "every worker shares" if not free else f"workers beyond the {free:.0f} core(s) it leaves free share"
    basis.append(
        f"the training keeps {threads:.0f} of {cores} usable core(s) busy while it computes (its CPU over its wall:"
        f" {ratio:.1f}): {who} a core with its threads, which holds back its parallel work (the model's contention"
        " term)"
    )
    return threads


def _share_of_machine(manifest: Manifest | None, basis: list[str]) -> tuple[int | None, float | None]:
    """The usable cores and available RAM (MiB) of this rank: the machine's, shared among the ranks on it."""
    host = manifest.host if manifest else None
    cores = host.usable_cores if host else None
    ram_mib: float | None = host.ram_available_mib if host else None
    if cores is None:
        basis.append("usable cores unknown (no dlprof manifest): the CPU bound is left out")
    sharing = (manifest.local_world_size or 1) if manifest else 1
    if sharing > 1 and cores is not None:
        # Ranks on one machine share its cores and RAM: each rank's workers get their share.
        cores = max(1, cores // sharing)
        ram_mib = ram_mib / sharing if ram_mib else ram_mib
        basis.append(
            f"{sharing} ranks share this machine: {cores} usable core(s) and 1/{sharing} of the available RAM per rank"
        )
    return cores, ram_mib


def _producer(
    steps: StepBreakdown,
    loader: LoaderStats | None,
    host: Host | None,
    batches_per_step: float,
    loads_in_main: bool | None,
    unprofiled: UnprofiledStats | None,
    basis: list[str],
) -> tuple[float, float, float] | None:
    """What a batch costs to produce (wall and CPU ms) and the hand-off per step; None when unknown."""
    if loader is not None:
        batch_ms = max(0.0, loader.batch.mean_ms - loader.batch_runq_ms_mean)
        batch_cpu_ms = loader.batch_cpu_ms_mean
        basis.append("producer cost measured in the loader processes (dlprof spans)")
        if loader.in_main_process and unprofiled is not None and steps.categories["data_wait"].mean_ms > 0:
            # Loading in the main process ran under the profiler too (collate's tensor ops): scale it
            # to the unprofiled steps' time in the DataLoader.
            scale = min(1.0, unprofiled.wait_ms / steps.categories["data_wait"].mean_ms)
            batch_ms, batch_cpu_ms = batch_ms * scale, batch_cpu_ms * scale
        return batch_ms, batch_cpu_ms, _handoff_ms(loader, host, batches_per_step, basis)
    if loads_in_main:
        # Without spans, a num_workers=0 run's data wait is the loading itself.
        batch_ms = (unprofiled.wait_ms if unprofiled else steps.categories["data_wait"].mean_ms) / batches_per_step
        basis.append(
            "no worker spans: producer cost taken from the data wait, assumed to be all CPU (record with dlprof record"
            " to measure it)"
        )
        return batch_ms, batch_ms, 0.0
    basis.append(
        "no worker spans: what a batch costs to produce is unknown, so no num_workers can be predicted (record with"
        " dlprof record)"
    )
    return None


def _consumer(
    steps: StepBreakdown,
    loader: LoaderStats | None,
    gpu: GpuStats | None,
    manifest: Manifest | None,
    cores: int | None,
    batches_per_step: float,
    unprofiled: UnprofiledStats | None,
    basis: list[str],
) -> tuple[float, float]:
    """The step without data wait (ms), and the main process's CPU time per step (core-ms), loading left out."""
    host = manifest.host if manifest else None
    in_main = loader.batch_cpu_ms_mean * batches_per_step if (loader and loader.in_main_process) else 0.0
    if unprofiled is not None:
        basis.append(
            f"consumer and main-process CPU time from {unprofiled.reference_steps} unprofiled reference steps "
            "(means): what your training does without dlprof"
        )
        return unprofiled.consumer_ms, max(0.0, unprofiled.cpu_ms - in_main)
    # The step without data wait, less the time the training thread waited for a core: how long the
    # consumer takes on its own; contention for cores is the CPU bound's to model.
    measured = manifest.main_process_cpu if manifest else None
    runq = measured.runq_ms_per_step if measured else 0.0
    consumer = max(0.0, steps.consumer_ms - runq)
    basis.append(
        "no unprofiled reference steps: predictions are of profiled steps, which the profiler slows (record with"
        " dlprof record)"
    )
    if runq:
        basis.append(f"the training thread waited {runq:.2f} ms per step for a core: left out of the consumer's time")
    if measured:
        basis.append("main process CPU time measured per step")
        return consumer, max(0.0, measured.cpu_ms_per_step - in_main)
    threads = 1 if gpu is not None else min((host.torch_threads if host else None) or cores or 1, cores or 1)
    basis.append(f"main process CPU time not measured: assumed {threads} busy core(s) for the whole step")
    return consumer, consumer * threads


def _worker_send_ms(loader: LoaderStats | None, host: Host | None, batches_per_step: float) -> float:
    """Per step with workers: the workers' CPU to send batches (tensors moved to shared memory), from this machine's
    calibration."""
    handoff = host.handoff if host else None
    tensors = loader.tensors_per_batch if loader else 0.0
    if handoff is None or handoff.worker_per_tensor_ms is None or not tensors:
        return 0.0
    return batches_per_step * ((handoff.worker_per_batch_ms or 0.0) + handoff.worker_per_tensor_ms * tensors)


def _epoch_model(unprofiled: UnprofiledStats | None, host: Host | None, basis: list[str]) -> EpochModel | None:
    epoch = unprofiled.epoch if unprofiled else None
    if epoch is None or epoch.steps_per_epoch is None:
        basis.append("epoch length unknown: predictions are for steps inside an epoch, worker restarts left out")
        return None
    startup = host.worker_startup if host else None
    if epoch.restart_ms is not None and epoch.num_workers and not epoch.persistent_workers:
        basis.append(
            f"an epoch boundary (workers restarting) measured at {epoch.restart_ms:.0f} ms over"
            f" {epoch.boundaries_measured} boundary(ies)"
        )
    elif not epoch.persistent_workers and epoch.fork_probe_ms is not None:
        basis.append(
            "worker restarts per epoch estimated from this machine's start-up calibration, the first batch, and the"
            f" fork probe (forking once slowed the next {EPOCH_SETTLE_STEPS} steps by {epoch.fork_probe_ms:.0f} ms in"
            " all); dlprof sweep measures them"
        )
    elif not epoch.persistent_workers:
        basis.append(
            "worker restarts per epoch estimated from this machine's start-up calibration and the first batch: a lower"
            " bound (forking also slows the training process for a few steps after); dlprof sweep measures it"
        )
    return EpochModel(
        steps_per_epoch=epoch.steps_per_epoch,
        persistent_workers=epoch.persistent_workers,
        restart_measured_ms=epoch.restart_ms if epoch.num_workers else None,
        startup_fixed_ms=startup.fixed_ms if startup else None,
        startup_per_worker_ms=startup.per_worker_ms if startup else None,
        fork_cost_ms=epoch.fork_probe_ms,
    )


def _handoff_ms(loader: LoaderStats, host: Host | None, batches_per_step: float, basis: list[str]) -> float:
    """What receiving ready batches from workers costs the main process per step, on an idle machine.

    This machine's calibration (a worker's batches already waiting). The waits for ready batches that
    a run with workers measured include contention (the worker's GIL, busy cores): those belong to
    the CPU bound and the anchoring on the measured step, not to a fixed cost added to every count.
    """
    calibration = host.handoff if host else None
    if calibration and loader.tensors_per_batch:
        per_batch = calibration.per_batch_ms + calibration.per_tensor_ms * loader.tensors_per_batch
        basis.append(
            f"hand-off to the main process from this machine's calibration: {per_batch:.2f} ms per batch of"
            f" {loader.tensors_per_batch:g} tensors"
        )
        return per_batch * batches_per_step
    if not loader.in_main_process and loader.wait:
        basis.append(
            "hand-off to the main process as measured in the run (under load, an upper bound):"
            f" {loader.wait.ready_ms_mean:.2f} ms per step"
        )
        return loader.wait.ready_ms_mean
    basis.append("hand-off to the main process unknown: predictions with workers leave it out")
    return 0.0
