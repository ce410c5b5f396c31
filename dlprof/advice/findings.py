"""Faults of the input pipeline beyond the DataLoader's settings, from the run's evidence
(:class:`~dlprof.results.findings.PipelineFacts`): each a :class:`~dlprof.results.findings.Finding` with its numbers,
its fix in one line and what the fix buys where that can be told (measured by the trials, predicted by the throughput
model, or an upper bound).

Thresholds are named constants; :func:`input_findings` returns the findings that fire, the largest gain first.
"""

from __future__ import annotations

import math
from dataclasses import replace

from dlprof.advice.model import ModelInputs, predict
from dlprof.analysis.pipeline import in_flight_bytes
from dlprof.core.manifest import LoaderConfig
from dlprof.results.analysis import LoaderStats, StepBreakdown
from dlprof.results.findings import (
    FINDING_COPY_ON_READ,
    FINDING_FEW_SHARDS,
    FINDING_PADDING,
    FINDING_PRETOKENIZE,
    FINDING_SHARED_MEMORY,
    FINDING_SPIN_WAIT,
    FINDING_THREADS,
    FINDING_UNSHARDED_ITERABLE,
    GAIN_MEASURED,
    GAIN_NONE,
    GAIN_PREDICTED,
    GAIN_UP_TO,
    PADDED_FIXED,
    SEVERITIES,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
    CopyOnReadFacts,
    DuplicateFacts,
    Finding,
    PaddingFacts,
    PipelineFacts,
    SharedMemoryFacts,
    SpinFacts,
    ThreadFacts,
)
from dlprof.results.trials import PaddingTrial, TrialsResult

#: Padding is worth naming when at least this share of the positions computed on is padding ...
PADDING_MIN_PCT = 20.0
#: ... and padding each batch to its longest sequence would make training at least this much faster (the bound).
PADDING_MIN_GAIN_PCT = 5.0
#: Pre-tokenizing is worth naming when it makes the recommended count predicted at least this much faster: rewriting a
#: data preparation for less is within what two launches of one training stray apart on a shared machine (the
#: built-in workload's fast tokenizer, under a loaded machine, came to a few per cent).
PRETOKENIZE_MIN_GAIN_PCT = 10.0
#: Batches that other workers made alike in one epoch beyond this share: the workers repeat each other's samples (an
#: unsharded dataset repeats every sample in each of its n workers, (n - 1) / n of the batches).
DUPLICATED_MIN_PCT = 10.0
#: A worker process's own threads: its main thread, its result queue's feeder thread, and two to spare for libraries'
#: idle helpers (a worker tokenizing with TOKENIZERS_PARALLELISM=false has 4); beyond these it runs a thread pool.
WORKER_BASE_THREADS = 4
#: Threads of a worker that wait rather than compute (the result queue's feeder): left out of its demand for cores.
WORKER_IDLE_THREADS = 1
#: A worker's CPU time over its wall time above this: more than one of its threads computed at once (one thread alone
#: stays at or below 1; the margin covers the 10 ms resolution of CPU-time clocks). On cores the training keeps busy a
#: pool's threads seldom run at once, so a pool with a tokenizer's parallelism on counts without it.
MULTI_THREADED_CPU_PER_WALL = 1.05
#: The threads finding claims a gain only when the training thread waited for a core at least this share of the step.
RUNQ_MIN_PCT = 1.0
#: A worker's memory grew with the samples it touched (copy-on-read) when it grew at least this much (MiB) ...
COPY_ON_READ_MIN_MIB = 16.0
#: ... in step with the samples touched (correlation of its USS with them).
COPY_ON_READ_MIN_CORRELATION = 0.9
#: /dev/shm to advise: the batches in flight at the count that needs most, with this much room to spare (the main
#: process holds the batch it trains on, and memory fragments).
SHM_HEADROOM = 2.0

#: Training's other threads spin against the workers when, while the training thread waited for data (at least
#: this share of the step), they kept at least this many cores busy, the step's CPU (the training process's and the
#: workers') came to at least this share of the usable cores, and the workers want at least this many cores: then
#: they want what the spinning takes. A passive wait policy wakes the threads at every parallel region, which costs
#: the training's own compute: on the built-in workload (workers 0.09 cores) it made plain launches 40 % slower,
#: with a slow tokenizer (workers 1.03 cores) 21 % faster (docs/validation.md#training-threads-spinning). The floors
#: leave room for a machine that other work shares (one core kept busy beside the slow tokenizer's case: 70 % of the
#: cores asked, workers 0.52 cores, 0.36 cores spinning).
SPIN_MIN_CORES = 0.1
SPIN_MIN_WAIT_PCT = 5.0
SPIN_MIN_BUSY_PCT = 60.0
SPIN_MIN_WORKERS_CORES = 0.3
_MIB = 1024 * 1024
_GIB = 1024 * _MIB


def input_findings(
    facts: PipelineFacts,
    steps: StepBreakdown,
    loader: LoaderStats | None,
    inputs: ModelInputs | None,
    num_workers: int | None,
    candidates: list[int],
    config: LoaderConfig | None,
    trials: TrialsResult | None = None,
) -> tuple[Finding, ...]:
    """Every finding that fires, the largest gain first, then those without a gain by severity.

    Args:
        trials: what the run's in-process trials measured (its padding segment measures the padding's gain).
        inputs: the throughput model's inputs (None: no prediction can be made).
        num_workers: the recommended count (None: no recommendation).
        candidates: the counts the recommendation considered.
    """
    found = [
        padding_finding(facts.padding, steps, trials) if facts.padding else None,
        pretokenize_finding(loader, inputs, num_workers),
        unsharded_finding(facts.duplicates) if facts.duplicates else None,
        few_shards_finding(config, num_workers),
        shared_memory_finding(facts.shared_memory, num_workers, candidates) if facts.shared_memory else None,
        threads_finding(facts.threads) if facts.threads else None,
        copy_on_read_finding(facts.copy_on_read, config) if facts.copy_on_read else None,
        spin_finding(facts.spin) if facts.spin else None,
    ]
    return tuple(sorted((f for f in found if f is not None), key=_order))


def _order(finding: Finding) -> tuple[bool, float, int]:
    gain = finding.gain_pct
    return gain is None, -(gain or 0.0), SEVERITIES.index(finding.severity)


def _faster_pct(saved_share: float) -> float:
    """How much faster a step gets, %, when ``saved_share`` (0..1) of it goes."""
    return 100 * (1 / (1 - min(max(0.0, saved_share), 0.99)) - 1)


def _size(nbytes: float) -> str:
    return f"{nbytes / _GIB:.1f} GiB" if nbytes >= _GIB else f"{nbytes / _MIB:.1f} MiB"


def _token_compute(steps: StepBreakdown) -> tuple[float, str]:
    """The step's time that grows with the tokens computed on (ms), and what it is."""
    cat = steps.categories
    passes = cat["forward"].mean_ms + cat["backward"].mean_ms
    if passes > 0:
        return passes, "forward and backward"
    rest = steps.consumer_ms - cat["optimizer"].mean_ms - cat["h2d"].mean_ms
    return max(0.0, rest), "the step less its data wait, optimizer and copies"


def padding_finding(facts: PaddingFacts, steps: StepBreakdown, trials: TrialsResult | None = None) -> Finding | None:
    """Batches padded beyond their longest sequence: the gain of padding to the longest, measured where the trials
    trained a segment on trimmed batches, else an upper bound from the tokens (the work that grows with tokens shrinks
    with them at most in proportion, attention's quadratic term aside)."""
    if facts.padded_tokens <= 0 or steps.step.mean_ms <= 0:
        return None
    compute_ms, what = _token_compute(steps)
    share = min(1.0, compute_ms / steps.step.mean_ms)
    to_longest = 1 - facts.longest_tokens / facts.padded_tokens
    bound = _faster_pct(share * to_longest)
    measured = trials.padding if trials is not None else None
    if measured is not None and measured.trusted and measured.gain_pct is not None:
        gain, basis = measured.gain_pct, GAIN_MEASURED
    else:
        gain, basis = bound, GAIN_UP_TO
    if facts.padding_pct < PADDING_MIN_PCT or gain < PADDING_MIN_GAIN_PCT:
        return None
    packed = _faster_pct(share * (1 - facts.real_tokens / facts.padded_tokens))
    padded = f"to a fixed width of {facts.width}, beyond" if facts.mode == PADDED_FIXED and facts.width else "beyond"
    told = f", told by {facts.source}" if facts.source else ""
    evidence = (
        f"{facts.padding_pct:.0f} % of the positions computed on are padding (mean over {facts.batches} batches{told});"
        f" batches are padded {padded} their longest sequence: padded to it,"
        f" they would compute on {100 * facts.longest_tokens / facts.padded_tokens:.0f} % of the positions, packed"
        f" (or grouped by length, which comes near it) on {100 * facts.real_tokens / facts.padded_tokens:.0f} %."
        f" {what.capitalize()} take {100 * share:.0f} % of the step: padding to the longest makes it up to"
        f" {bound:.0f} % faster, packing up to {packed:.0f} %"
    ) + _padding_measured(measured, trials.padding_not_measured if trials is not None else None)
    return Finding(
        id=FINDING_PADDING,
        severity=SEVERITY_WARNING,
        evidence=evidence,
        fix=(
            "pad each batch to its longest sequence: tokenizer(..., padding='longest') or DataCollatorWithPadding"
            " instead of padding='max_length' (then group_by_length=True or packing for more)"
        ),
        gain_pct=gain,
        gain_basis=basis,
        title="pad to the longest sequence",
        reason=f"{facts.padding_pct:.0f} % of the tokens are padding",
    )


def _padding_measured(measured: PaddingTrial | None, not_measured: str | None) -> str:
    """What the trials' padding segment measured, for the padding finding's evidence ("" without trials)."""
    if measured is None:
        return f"; {not_measured}: the bound stands" if not_measured else ""
    trimmed = measured.trimmed.steps_per_s if measured.trimmed is not None else None
    if trimmed is None or measured.padded_steps_per_s is None or measured.gain_pct is None:
        return "; the trials' segment with trimmed batches had no steady steps to measure: the bound stands"
    setting = f"num_workers={measured.num_workers}{', persistent' if measured.persistent_workers else ''}"
    dropped = f", {measured.trimmed_pct:.0f} % of the positions" if measured.trimmed_pct is not None else ""
    said = (
        f"; measured in this training at {setting}: batches trimmed to their longest sequence (only positions the loss"
        f" ignores dropped{dropped}) trained at {trimmed:.2f} steps/s against {measured.padded_steps_per_s:.2f}"
        f" padded ({measured.gain_pct:+.1f} %, inside an epoch)"
    )
    return said if measured.trusted else f"{said}, too short or too spread to trust: the bound stands"


def pretokenized_inputs(inputs: ModelInputs, loader: LoaderStats) -> ModelInputs | None:
    """The model's inputs with the tokenizer's share of a batch taken out (wall and CPU alike), anchored as the run is:
    its measured step scaled by what the model predicts the tokenizer costs at the recorded count. None without
    tokenizer time."""
    if loader.tokenize.mean_ms <= 0 or loader.batch.mean_ms <= 0:
        return None
    wall_share = min(1.0, loader.tokenize.mean_ms / loader.batch.mean_ms)
    cpu_share = min(1.0, loader.tokenize_cpu_ms_mean / loader.batch_cpu_ms_mean) if loader.batch_cpu_ms_mean else 0.0
    without = replace(
        inputs, batch_ms=inputs.batch_ms * (1 - wall_share), batch_cpu_ms=inputs.batch_cpu_ms * (1 - cpu_share)
    )
    if inputs.anchor is not None:
        recorded, measured_ms = inputs.anchor
        # The anchor's factor (measured over modelled at the recorded count) stays the run's own.
        before = predict(replace(inputs, measured_step_ms=None), recorded).step_ms
        after = predict(replace(without, measured_step_ms=None), recorded).step_ms
        without = replace(without, measured_step_ms=measured_ms * after / before)
    return without


def pretokenize_finding(
    loader: LoaderStats | None, inputs: ModelInputs | None, num_workers: int | None
) -> Finding | None:
    """Tokenizing in the loader, priced: the recommended count (and 0 workers) predicted with the tokenizer's cost
    taken out."""
    if loader is None or inputs is None:
        return None
    count = num_workers if num_workers is not None else inputs.recorded_workers
    without = pretokenized_inputs(inputs, loader)
    if count is None or without is None:
        return None
    speeds = {
        n: (predict(inputs, n).effective_steps_per_s, predict(without, n).effective_steps_per_s) for n in {count, 0}
    }
    before, after = speeds[count]
    gain = 100 * (after / before - 1)
    if gain < PRETOKENIZE_MIN_GAIN_PCT:
        return None
    zero = ""
    if count != 0:
        zero_before, zero_after = speeds[0]
        zero_gain = 100 * (zero_after / zero_before - 1)
        zero = f"; at num_workers=0, {zero_after:.2f} instead of {zero_before:.2f} ({zero_gain:+.0f} %)"
    share = 100 * min(1.0, loader.tokenize.mean_ms / loader.batch.mean_ms)
    evidence = (
        f"the tokenizer takes {loader.tokenize.mean_ms:.2f} of {loader.batch.mean_ms:.2f} ms per batch ({share:.0f} %);"
        f" without it, num_workers={count} is predicted at {after:.2f} steps/s instead of {before:.2f}"
        f" ({gain:+.0f} %){zero}"
    )
    return Finding(
        id=FINDING_PRETOKENIZE,
        severity=SEVERITY_WARNING,
        evidence=evidence,
        fix="tokenize the dataset once before training (datasets' Dataset.map(tokenize, batched=True)); load token ids",
        gain_pct=gain,
        gain_basis=GAIN_PREDICTED,
        title="pre-tokenize the dataset",
        reason=f"the tokenizer takes {share:.0f} % of a batch's time",
    )


def unsharded_finding(facts: DuplicateFacts) -> Finding | None:
    """Workers that yield the same batches: an iterable dataset every worker reads whole."""
    if facts.iterable is False or facts.workers < 2 or facts.duplicated_pct < DUPLICATED_MIN_PCT:
        return None
    evidence = (
        f"{facts.duplicated} of {facts.batches} batches ({facts.duplicated_pct:.0f} %) were made alike (same"
        f" fingerprint) by another of the {facts.workers} workers in the same epoch: each worker reads the whole"
        " dataset, so the training sees its samples several times an epoch"
    )
    return Finding(
        id=FINDING_UNSHARDED_ITERABLE,
        severity=SEVERITY_ERROR,
        evidence=evidence,
        fix=(
            "shard in __iter__ with torch.utils.data.get_worker_info() (worker id of num_workers takes every"
            " num_workers-th sample); datasets: an IterableDataset with n_shards >= num_workers, split_dataset_by_node"
            " across ranks"
        ),
        gain_pct=None,
        gain_basis=GAIN_NONE,
        title="shard the iterable dataset across workers",
        reason=f"{facts.duplicated_pct:.0f} % of the batches repeat another worker's",
    )


def few_shards_finding(config: LoaderConfig | None, num_workers: int | None) -> Finding | None:
    """More workers (recorded or advised) than the iterable dataset has shards: the rest get none and stop."""
    shards = config.dataset_shards if config is not None else None
    if config is None or shards is None or shards < 1:
        return None
    counts = [(what, n) for what, n in (("recorded", config.num_workers), ("advised", num_workers)) if n]
    over = [(what, n) for what, n in counts if n > shards]
    if not over:
        return None
    said = " and ".join(f"num_workers={n} ({what})" for what, n in over)
    idle = max(n for _, n in over) - shards
    return Finding(
        id=FINDING_FEW_SHARDS,
        severity=SEVERITY_WARNING,
        evidence=f"the iterable dataset has {shards} shard(s) for {said}: up to {idle} worker(s) get no shard and stop",
        fix=f"use num_workers <= {shards}, or more shards (datasets: to_iterable_dataset(num_shards=N) or more files)",
        gain_pct=None,
        gain_basis=GAIN_NONE,
        title="fewer shards than workers",
    )


def shared_memory_finding(facts: SharedMemoryFacts, num_workers: int | None, candidates: list[int]) -> Finding | None:
    """Batches in flight beyond ``/dev/shm``'s free space: an error at the recorded count, a warning where a count the
    recommendation considered does not fit."""
    recorded = facts.recorded_workers
    top = max([*candidates, recorded or 0, num_workers or 0])
    if top <= facts.max_workers:
        return None
    free = facts.shm_free_bytes // facts.ranks_sharing
    share = f" (this rank's 1/{facts.ranks_sharing})" if facts.ranks_sharing > 1 else ""
    per_worker = in_flight_bytes(facts, 1)
    evidence = (
        f"a batch holds {_size(facts.batch_bytes_p90)} (p90; median {_size(facts.batch_bytes_p50)}), each worker keeps"
        f" {facts.prefetch_factor} in flight through /dev/shm: {_size(per_worker)} per worker, against"
        f" {_size(free)} free{share} of {_size(facts.shm_total_bytes)}; at most {facts.max_workers} worker(s) fit"
    )
    broken = recorded is not None and recorded > facts.max_workers
    if recorded is not None and broken:
        evidence += f"; num_workers={recorded} (as recorded) needs {_size(in_flight_bytes(facts, recorded))}"
    else:
        evidence += "; the recommendation stays within it"
    needed = in_flight_bytes(facts, max(recorded or 0, num_workers or 0, 1)) * facts.ranks_sharing * SHM_HEADROOM
    size_gib = max(1, math.ceil(needed / _GIB))
    return Finding(
        id=FINDING_SHARED_MEMORY,
        severity=SEVERITY_ERROR if broken else SEVERITY_WARNING,
        reason=(
            f"num_workers={recorded} keeps {_size(in_flight_bytes(facts, recorded))} in flight against"
            f" {_size(free)} free"
            if broken and recorded is not None
            else None
        ),
        evidence=evidence,
        fix=(
            f"give /dev/shm room: docker run --shm-size={size_gib}g (or --ipc=host; Kubernetes: an emptyDir with medium"
            " Memory at /dev/shm), else fewer workers or a smaller prefetch_factor"
        ),
        gain_pct=None,
        gain_basis=GAIN_NONE,
        title="batches in flight do not fit in /dev/shm",
    )


def threads_finding(facts: ThreadFacts) -> Finding | None:
    """Workers that run thread pools, with training's own threads, wanting more cores than the rank has."""
    busiest: dict[int | None, tuple[int, float | None]] = {}
    for w in facts.workers:  # a worker restarted every epoch is one worker: its most threads
        known = busiest.get(w.worker_id)
        if known is None or w.threads_peak > known[0]:
            busiest[w.worker_id] = (w.threads_peak, w.cpu_per_wall)
    parallel = (facts.tokenizers_parallelism or "").lower() not in ("false", "0", "off")
    tokenizer_pool = parallel and (facts.tokenizer_in_workers or facts.tokenizers_imported)
    pooled = [
        (threads, ratio)
        for threads, ratio in busiest.values()
        if threads > WORKER_BASE_THREADS
        and (tokenizer_pool or (ratio is not None and ratio >= MULTI_THREADED_CPU_PER_WALL))
    ]
    cores = facts.usable_cores
    training = facts.torch_threads or 1
    demand = sum(max(1, threads - WORKER_IDLE_THREADS) for threads, _ in busiest.values()) + training
    if not pooled or cores is None or demand <= cores:
        return None
    most_threads = max(threads for threads, _ in pooled)
    most_cpu = max((ratio for _, ratio in pooled if ratio is not None), default=None)
    cpu = f", CPU/wall up to {most_cpu:.2f}" if most_cpu is not None else ""
    evidence = (
        f"{len(pooled)} of {len(busiest)} workers ran thread pools (up to {most_threads} threads{cpu}); with"
        f" training's {training} intra-op thread(s) they want {demand} threads on"
        f" {cores} usable core(s)"
    )
    fixes = ["torch.set_num_threads(1) in worker_init_fn (or OMP_NUM_THREADS=1)"]
    if tokenizer_pool:
        who = "the workers tokenize" if facts.tokenizer_in_workers else "the fast tokenizers library is loaded"
        evidence += f"; {who} with TOKENIZERS_PARALLELISM {facts.tokenizers_parallelism or 'unset'}"
        fixes.insert(0, "TOKENIZERS_PARALLELISM=false before the tokenizer is loaded")
    gain, basis, reason = None, GAIN_NONE, None
    runq = facts.training_runq_pct
    if runq is not None and runq >= RUNQ_MIN_PCT:
        gain, basis = _faster_pct(runq / 100), GAIN_UP_TO
        reason = f"the training thread waits for a core {runq:.0f} % of the step"
        evidence += f"; the training thread waited for a core {runq:.0f} % of the step (the most this can give)"
    return Finding(
        id=FINDING_THREADS,
        severity=SEVERITY_WARNING,
        evidence=evidence,
        fix="; ".join(fixes),
        gain_pct=gain,
        gain_basis=basis,
        title="workers oversubscribe the cores with threads",
        reason=reason,
    )


def copy_on_read_finding(facts: CopyOnReadFacts, config: LoaderConfig | None) -> Finding | None:
    """Workers' private memory growing in step with the samples they read: Python objects copied page by page."""
    if facts.map_style is False:
        return None
    largest: dict[int | None, tuple[float, float, float, int]] = {}
    for w in facts.workers:
        if (
            w.growth_mib >= COPY_ON_READ_MIN_MIB
            and w.correlation >= COPY_ON_READ_MIN_CORRELATION
            and w.kib_per_sample > 0
            and w.growth_mib > largest.get(w.worker_id, (0.0,))[0]
        ):
            largest[w.worker_id] = (w.growth_mib, w.kib_per_sample, w.correlation, w.samples_touched)
    if not largest:
        return None
    grown = list(largest.values())
    per_worker = sum(g[0] for g in grown) / len(grown)
    workers = max(len(grown), facts.num_workers or 0)
    kib = sum(g[1] for g in grown) / len(grown)
    evidence = (
        f"worker memory (USS) grew {per_worker:.0f} MiB per worker ({per_worker * workers:.0f} MiB over {workers}"
        f" workers) in step with the samples they read: {kib:.1f} KiB per sample (correlation"
        f" {min(g[2] for g in grown):.2f}, up to {max(g[3] for g in grown)} samples per worker)"
    )
    evidence += ": reading Python objects writes their reference counts, which copies their pages into every worker"
    return Finding(
        id=FINDING_COPY_ON_READ,
        severity=SEVERITY_WARNING,
        evidence=evidence,
        fix="hold the samples in numpy arrays or Arrow (a datasets.Dataset) instead of Python lists, dicts and strings",
        gain_pct=None,
        gain_basis=GAIN_NONE,
        title="workers copy the dataset as they read it (copy-on-read)",
    )


def spin_finding(facts: SpinFacts) -> Finding | None:
    """Training's idle intra-op threads spinning (OpenMP's default wait policy) on the cores its workers need.

    The gain is not told: the spin also holds each parallel region's barrier while a worker has the core, so no
    count from one run bounds what a passive wait policy gives; a relaunch with the fix measures it."""
    if facts.step_ms <= 0:
        return None
    wait_pct = 100 * facts.wait_ms / facts.step_ms
    busy_pct = 100 * (facts.thread_cpu_ms + facts.others_cpu_ms + facts.workers_cpu_ms) / facts.step_ms
    busy_pct /= facts.usable_cores
    workers_cores = facts.workers_cpu_ms / facts.step_ms
    if (
        (facts.omp_wait_policy or "").strip().lower() == "passive"
        or facts.spinning_cores < SPIN_MIN_CORES
        or wait_pct < SPIN_MIN_WAIT_PCT
        or busy_pct < SPIN_MIN_BUSY_PCT
        or workers_cores < SPIN_MIN_WORKERS_CORES
    ):
        return None
    threads = f"its {facts.torch_threads} intra-op threads" if facts.torch_threads else "its other threads"
    evidence = (
        f"while the training thread waited for data ({wait_pct:.0f} % of the step, {facts.steps} steady steps),"
        f" {threads} kept {facts.spinning_cores:.2f} cores busy; none of the training's work runs then, so that is"
        f" spin-waiting (OMP_WAIT_POLICY {facts.omp_wait_policy or 'unset'}). The step asked"
        f" {busy_pct:.0f} % of the {facts.usable_cores} usable core(s): the training thread"
        f" {facts.thread_cpu_ms:.1f} ms of CPU, its other threads {facts.others_cpu_ms:.1f} ms, the"
        f" {facts.num_workers} workers {facts.workers_cpu_ms:.1f} ms. The gain is not told from one run (a passive"
        " policy also wakes the threads at every parallel region): relaunch with the fix and compare (dlprof diff)"
    )
    threads_fix = max(1, facts.usable_cores - facts.num_workers)
    return Finding(
        id=FINDING_SPIN_WAIT,
        severity=SEVERITY_WARNING,
        evidence=evidence,
        fix=(
            "OMP_WAIT_POLICY=PASSIVE in the training's environment (read when torch starts), or fewer intra-op"
            f" threads (torch.set_num_threads({threads_fix}) with {facts.num_workers} workers on"
            f" {facts.usable_cores} cores)"
        ),
        gain_pct=None,
        gain_basis=GAIN_NONE,
        title="training's idle threads spin on the workers' cores",
    )
