"""The input pipeline beyond the DataLoader's settings, as the recording shows it: padding, batches that different
workers made alike, the bytes in flight through ``/dev/shm``, the threads that share the cores (and training's own
that spin while it waits for data), and workers' memory growing with the samples they touch
(:class:`~dlprof.results.findings.PipelineFacts`).

Pure functions of the manifest (what the probe measured of each batch, the host, the memory sampler's series) and of
the loader's and the unprofiled steps' statistics; :mod:`dlprof.advice.findings` turns the facts into findings.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections import defaultdict

from dlprof.analysis.stats import percentile
from dlprof.analysis.unprofiled import reference_step_indices
from dlprof.core.manifest import BatchFacts, LoaderConfig, Manifest, ProcessMemory, WorkerStart
from dlprof.results.analysis import LoaderStats, UnprofiledStats
from dlprof.results.findings import (
    PADDED_FIXED,
    PADDED_OTHER,
    PADDED_TO_LONGEST,
    CopyOnReadFacts,
    DuplicateFacts,
    PaddingFacts,
    PipelineFacts,
    SharedMemoryFacts,
    SpinFacts,
    ThreadFacts,
    WorkerGrowth,
    WorkerThreads,
)

#: PyTorch's ``prefetch_factor`` when the DataLoader was given none: batches in flight per worker.
DEFAULT_PREFETCH_FACTOR = 2
#: The memory sampler's role of a DataLoader worker process (capture/merge's ``memory_summary``).
WORKER_ROLE = "worker"
#: Fewer memory samples than this after a worker's first batch tell no trend of its memory. Three: a reading walks the
#: process's page tables, so the sampler's duty limit spaces a worker's readings ~10 s apart in a big training (2
#: workers), and a recording of a minute gets three or four; the finding's floor on growth (16 MiB) is what tells
#: copying from noise, the points only that it kept on.
MIN_GROWTH_POINTS = 3


def pipeline_facts(
    manifest: Manifest | None, loader: LoaderStats | None = None, unprofiled: UnprofiledStats | None = None
) -> PipelineFacts:
    """Everything the run shows of its input pipeline; empty without a manifest."""
    if manifest is None:
        return PipelineFacts()
    rows = _training_batches(manifest)
    return PipelineFacts(
        padding=padding_facts(manifest.batches, rows),
        duplicates=duplicate_facts(manifest.batches, rows, manifest.loader),
        shared_memory=shared_memory_facts(manifest, rows),
        threads=thread_facts(manifest, loader, unprofiled),
        copy_on_read=copy_on_read_facts(manifest, rows),
        spin=spin_facts(manifest, loader),
    )


def _training_batches(manifest: Manifest) -> list[int]:
    """The indices of the training loader's batches in ``manifest.batches`` (every batch when the loader is unknown)."""
    batches = manifest.batches
    if not batches.columns_agree():
        return []
    loader_id = manifest.loader.id if manifest.loader is not None else None
    return [i for i in range(len(batches)) if loader_id is None or batches.loader[i] == loader_id]


def padding_facts(batches: BatchFacts, rows: list[int]) -> PaddingFacts | None:
    """Real tokens against the positions computed on; None without token batches."""
    token_rows = [i for i in rows if batches.rows[i] > 0 and batches.width[i] > 0]
    if not token_rows:
        return None
    padded = real = longest = 0
    shares = []
    for i in token_rows:
        positions = batches.rows[i] * batches.width[i]
        tokens = min(max(0, batches.real_tokens[i]), positions)
        padded += positions
        real += tokens
        longest += batches.rows[i] * min(max(0, batches.longest[i]), batches.width[i])
        shares.append(100 * (1 - tokens / positions))
    widths = {batches.width[i] for i in token_rows}
    beyond = any(batches.longest[i] < batches.width[i] for i in token_rows)
    if not beyond:
        mode = PADDED_TO_LONGEST
    elif len(widths) == 1:
        mode = PADDED_FIXED
    else:
        mode = PADDED_OTHER
    return PaddingFacts(
        batches=len(token_rows),
        padded_tokens=padded,
        real_tokens=real,
        longest_tokens=longest,
        padding_pct=sum(shares) / len(shares),
        mode=mode,
        width=next(iter(widths)) if len(widths) == 1 else None,
        source=batches.padding_source,
    )


def duplicate_facts(batches: BatchFacts, rows: list[int], config: LoaderConfig | None) -> DuplicateFacts | None:
    """Batches of one epoch that more than one worker made alike; None without fingerprinted batches from workers."""
    made_by: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    for i in rows:
        if batches.worker[i] >= 0 and batches.fingerprint[i]:
            made_by[(batches.loader[i], batches.epoch[i], batches.fingerprint[i])].append(batches.worker[i])
    if not made_by:
        return None
    total = sum(len(workers) for workers in made_by.values())
    # Alike batches from one worker are the dataset repeating itself; from several, the workers repeating each other.
    duplicated = sum(len(workers) - 1 for workers in made_by.values() if len(set(workers)) > 1)
    return DuplicateFacts(
        batches=total,
        duplicated=duplicated,
        duplicated_pct=100 * duplicated / total,
        workers=len({w for workers in made_by.values() for w in workers}),
        iterable=config.iterable_dataset if config is not None else None,
        shards=config.dataset_shards if config is not None else None,
        num_workers=config.num_workers if config is not None else None,
    )


def shared_memory_facts(manifest: Manifest, rows: list[int]) -> SharedMemoryFacts | None:
    """The batches' bytes in flight against ``/dev/shm``; None when its size or the batches' bytes are unknown."""
    host = manifest.host
    sizes = [manifest.batches.nbytes[i] for i in rows if manifest.batches.nbytes[i] > 0]
    if host.shm_free_bytes is None or host.shm_total_bytes is None or not sizes:
        return None
    config = manifest.loader
    prefetch = (config.prefetch_factor if config is not None else None) or DEFAULT_PREFETCH_FACTOR
    p90 = math.ceil(percentile(sizes, 90))
    ranks = max(1, manifest.local_world_size or 1)
    recorded = config.num_workers if config is not None else None
    return SharedMemoryFacts(
        batch_bytes_p50=math.ceil(percentile(sizes, 50)),
        batch_bytes_p90=p90,
        prefetch_factor=prefetch,
        shm_total_bytes=max(0, host.shm_total_bytes),
        shm_free_bytes=max(0, host.shm_free_bytes),
        ranks_sharing=ranks,
        recorded_workers=recorded,
        recorded_bytes=p90 * prefetch * recorded if recorded is not None else None,
        max_workers=max(0, host.shm_free_bytes) // ranks // (p90 * prefetch),
    )


def in_flight_bytes(facts: SharedMemoryFacts, num_workers: int, prefetch_factor: int | None = None) -> int:
    """The bytes ``num_workers`` workers keep in ``/dev/shm`` (the 90th-percentile batch, ``prefetch_factor`` each)."""
    return facts.batch_bytes_p90 * (prefetch_factor or facts.prefetch_factor) * num_workers


def fits(facts: SharedMemoryFacts | None, num_workers: int, prefetch_factor: int | None = None) -> bool:
    """Whether ``num_workers``' batches in flight fit in this rank's share of ``/dev/shm``'s free space (True when
    unknown)."""
    if facts is None:
        return True
    return in_flight_bytes(facts, num_workers, prefetch_factor) <= facts.shm_free_bytes // facts.ranks_sharing


def thread_facts(
    manifest: Manifest, loader: LoaderStats | None, unprofiled: UnprofiledStats | None
) -> ThreadFacts | None:
    """The workers' threads and CPU, training's threads and the usable cores; None without workers' thread counts."""
    workers = tuple(
        WorkerThreads(
            pid=p.pid,
            worker_id=p.worker_id,
            threads_peak=p.threads_peak,
            cpu_per_wall=p.cpu_s / p.duration_s if p.cpu_s is not None and p.duration_s > 0 else None,
        )
        for p in manifest.memory.processes
        if p.role == WORKER_ROLE and p.threads_peak is not None and p.threads_peak > 0
    )
    if not workers:
        return None
    host = manifest.host
    return ThreadFacts(
        workers=workers,
        torch_threads=host.torch_threads,
        usable_cores=None if host.usable_cores is None else _rank_share(host.usable_cores, manifest),
        tokenizers_parallelism=host.tokenizers_parallelism,
        omp_num_threads=host.omp_num_threads,
        tokenizer_in_workers=bool(loader is not None and not loader.in_main_process and loader.tokenize.mean_ms > 0),
        tokenizers_imported="tokenizers" in manifest.versions,
        training_runq_pct=_runq_pct(manifest, unprofiled),
    )


def spin_facts(manifest: Manifest, loader: LoaderStats | None) -> SpinFacts | None:
    """The training process's other threads over its steady reference steps (:class:`SpinFacts`); None without
    workers, without the step clock's thread columns (older recordings), the usable cores, or steady steps."""
    clock, config, cores = manifest.step_clock, manifest.loader, manifest.host.usable_cores
    workers = config.num_workers if config is not None else None
    if not workers or loader is None or loader.in_main_process or not cores:
        return None
    if not clock.thread_cpu_ms or not clock.wait_others_cpu_ms:  # recorded before dlprof 0.8
        return None
    steps = reference_step_indices(manifest)
    if not steps:
        return None
    cores = _rank_share(cores, manifest)
    mean = lambda column: statistics.fmean(column[i] for i in steps)
    process_cpu_ms, thread_cpu_ms = mean(clock.cpu_ms), mean(clock.thread_cpu_ms)
    return SpinFacts(
        steps=len(steps),
        step_ms=mean(clock.wall_ms),
        wait_ms=mean(clock.wait_ms),
        others_in_wait_ms=mean(clock.wait_others_cpu_ms),
        others_cpu_ms=max(0.0, process_cpu_ms - thread_cpu_ms),
        thread_cpu_ms=thread_cpu_ms,
        workers_cpu_ms=loader.batch_cpu_ms_mean * mean(clock.batches),
        num_workers=workers,
        torch_threads=manifest.host.torch_threads,
        usable_cores=cores,
        omp_wait_policy=manifest.host.omp_wait_policy,
    )


def _rank_share(cores: int, manifest: Manifest) -> int:
    """This rank's share of the machine's usable ``cores`` (its ranks share them)."""
    return max(1, cores // max(1, manifest.local_world_size or 1))


def _runq_pct(manifest: Manifest, unprofiled: UnprofiledStats | None) -> float | None:
    """The training thread's waits for a core, % of the step: unprofiled when known, else over the profiled steps."""
    if unprofiled is not None and unprofiled.step_ms > 0:
        return min(100.0, 100 * max(0.0, unprofiled.runq_ms) / unprofiled.step_ms)
    cpu = manifest.main_process_cpu
    if cpu is not None and cpu.wall_ms_per_step > 0:
        return min(100.0, 100 * max(0.0, cpu.runq_ms_per_step) / cpu.wall_ms_per_step)
    return None


def copy_on_read_facts(manifest: Manifest, rows: list[int]) -> CopyOnReadFacts | None:
    """Each worker's USS against the samples it had touched; None when no worker's series lines up with its batches."""
    config = manifest.loader
    batch_size = (config.batch_size if config is not None else None) or 1
    grown = []
    for process in manifest.memory.processes:
        if process.role != WORKER_ROLE or process.worker_id is None:
            continue
        made = _batches_of(process, manifest, rows)
        samples = [(made_ns, count or batch_size) for made_ns, count in made]
        growth = _growth(process, samples)
        if growth is not None:
            grown.append(growth)
    if not grown:
        return None
    return CopyOnReadFacts(
        workers=tuple(grown),
        map_style=None if config is None or config.iterable_dataset is None else not config.iterable_dataset,
        num_workers=config.num_workers if config is not None else None,
    )


def _batches_of(process: ProcessMemory, manifest: Manifest, rows: list[int]) -> list[tuple[int, int]]:
    """(made_ns, rows) of the batches this worker process made: its worker id's, from its start to the next start of
    that worker id (workers restart at every epoch unless persistent)."""
    batches = manifest.batches
    start = next((w for w in manifest.workers if w.pid == process.pid), None)
    loader_id = start.loader if start is not None else (manifest.loader.id if manifest.loader is not None else None)
    lo, hi = (start.start_ns, _next_start(start, manifest.workers)) if start is not None else (0, None)
    return [
        (batches.made_ns[i], batches.rows[i])
        for i in rows
        if batches.worker[i] == process.worker_id
        and (loader_id is None or batches.loader[i] == loader_id)
        and batches.made_ns[i] >= lo
        and (hi is None or batches.made_ns[i] < hi)
    ]


def _next_start(start: WorkerStart, starts: tuple[WorkerStart, ...]) -> int | None:
    later = [
        w.start_ns
        for w in starts
        if w.loader == start.loader and w.worker_id == start.worker_id and w.start_ns > start.start_ns
    ]
    return min(later, default=None)


def _growth(process: ProcessMemory, samples: list[tuple[int, int]]) -> WorkerGrowth | None:
    """The worker's USS against the samples touched, at each memory sample from its first batch on."""
    if process.first_sample_ns is None or len(process.sample_ms) != len(process.uss_mib) or not samples:
        return None
    samples.sort()
    made = [made_ns for made_ns, _ in samples]
    touched_by = list(itertools.accumulate(count for _, count in samples))
    points: list[tuple[float, float]] = []
    for offset_ms, uss in zip(process.sample_ms, process.uss_mib, strict=True):
        made_before = bisect.bisect_right(made, process.first_sample_ns + offset_ms * 1e6)
        touched = touched_by[made_before - 1] if made_before else 0
        if touched > 0:  # before its first batch, a worker's memory grows with its start-up, not with samples
            points.append((float(touched), uss))
    if len(points) < MIN_GROWTH_POINTS or len({x for x, _ in points}) < 2:
        return None
    slope, correlation = _fit(points)
    return WorkerGrowth(
        pid=process.pid,
        worker_id=process.worker_id,
        points=len(points),
        samples_touched=int(points[-1][0]),
        growth_mib=points[-1][1] - points[0][1],
        kib_per_sample=1024 * slope,
        correlation=correlation,
    )


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares slope of y over x, and the correlation of x and y (0 when y does not vary)."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    slope = statistics.linear_regression(xs, ys).slope
    return slope, (statistics.correlation(xs, ys) if len(set(ys)) > 1 else 0.0)
