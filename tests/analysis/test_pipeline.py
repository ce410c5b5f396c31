"""The input pipeline's facts (dlprof.analysis.pipeline), with exact numbers on hand-built manifests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlprof.analysis.pipeline import (
    copy_on_read_facts,
    fits,
    in_flight_bytes,
    padding_facts,
    pipeline_facts,
    shared_memory_facts,
    spin_facts,
    thread_facts,
)
from dlprof.analysis.unprofiled import reference_step_indices
from dlprof.core.manifest import (
    BatchFacts,
    Host,
    LoaderConfig,
    MainProcessCpu,
    Manifest,
    MemorySummary,
    ProcessMemory,
    StepClock,
    WorkerStart,
)
from dlprof.results.analysis import LoaderStats, Summary, UnprofiledStats
from dlprof.results.findings import (
    PADDED_FIXED,
    PADDED_OTHER,
    PADDED_TO_LONGEST,
    DuplicateFacts,
    PaddingFacts,
    SharedMemoryFacts,
    WorkerGrowth,
    WorkerThreads,
)

T0 = 1_700_000_000_000_000_000


def batches(rows: list[dict], **extra) -> BatchFacts:
    """Columns from one dict per batch (defaults: loader 0, epoch 0, worker 0)."""
    base = {"loader": 0, "epoch": 0, "batch": 0, "worker": 0, "made_ns": T0, "rows": 0, "width": 0}
    base |= {"real_tokens": 0, "longest": 0, "nbytes": 0, "fingerprint": ""}
    full = [{**base, "batch": i, **row} for i, row in enumerate(rows)]
    return BatchFacts(**{name: tuple(r[name] for r in full) for name in base}, **extra)


def manifest(facts: BatchFacts | None = None, **changes) -> Manifest:
    facts = facts if facts is not None else BatchFacts()
    fields = {"manifest_version": 5, "loader": LoaderConfig(id=0, num_workers=2, batch_size=4), "batches": facts}
    return Manifest(**{**fields, **changes})


def every(facts: BatchFacts) -> list[int]:
    return list(range(len(facts)))


def test_padding_to_a_fixed_width():
    # Two batches of 2 rows padded to 8: 6 and 10 real tokens, longest 4 and 6. Positions 16 + 16, real 6 + 10, padded
    # to each batch's longest 2 * 4 + 2 * 6 = 20; shares 62.5 % and 37.5 %.
    facts = batches(
        [
            {"rows": 2, "width": 8, "real_tokens": 6, "longest": 4},
            {"rows": 2, "width": 8, "real_tokens": 10, "longest": 6},
            {"rows": 0},  # no token tensor: left out
        ],
        padding_source="attention_mask",
    )
    assert padding_facts(facts, every(facts)) == PaddingFacts(
        batches=2,
        padded_tokens=32,
        real_tokens=16,
        longest_tokens=20,
        padding_pct=50.0,
        mode=PADDED_FIXED,
        width=8,
        source="attention_mask",
    )


def test_padding_to_the_longest_and_otherwise():
    dynamic = batches([{"rows": 2, "width": 4, "real_tokens": 6, "longest": 4}, {"rows": 2, "width": 6, "longest": 6}])
    found = padding_facts(dynamic, every(dynamic))
    assert found is not None and (found.mode, found.width, found.longest_tokens, found.padded_tokens) == (
        PADDED_TO_LONGEST,
        None,
        20,
        20,
    )
    # Real tokens beyond the positions (a bad count) are read as the positions: no negative padding.
    assert found.real_tokens == 6 and found.padding_pct == pytest.approx((25 + 100) / 2)
    multiple = batches(
        [{"rows": 1, "width": 8, "real_tokens": 5, "longest": 5}, {"rows": 1, "width": 16, "longest": 9}]
    )
    assert padding_facts(multiple, every(multiple)).mode == PADDED_OTHER
    assert padding_facts(batches([{"rows": 0}]), [0]) is None


def test_only_the_training_loaders_batches_count():
    facts = batches([{"rows": 1, "width": 8, "real_tokens": 8, "longest": 8}, {"loader": 1, "rows": 1, "width": 8}])
    found = pipeline_facts(manifest(facts)).padding
    assert found is not None and (found.batches, found.padding_pct) == (1, 0.0)


def test_batches_that_different_workers_made_alike_are_duplicates():
    facts = batches(
        [
            {"worker": 0, "fingerprint": "a"},
            {"worker": 1, "fingerprint": "a"},
            {"worker": 0, "fingerprint": "b"},
            {"worker": 1, "fingerprint": "b"},
            {"worker": 0, "fingerprint": "c"},
            {"worker": 0, "fingerprint": "c"},  # one worker repeating itself: the dataset's, not the workers'
            {"worker": 1, "fingerprint": "a", "epoch": 1},  # another epoch: not a duplicate
            {"worker": -1, "fingerprint": "a"},  # the main process: not a worker
            {"worker": 1, "fingerprint": ""},  # not fingerprinted
        ]
    )
    config = LoaderConfig(id=0, num_workers=2, iterable_dataset=True, dataset_shards=1)
    assert pipeline_facts(manifest(facts, loader=config)).duplicates == DuplicateFacts(
        batches=7,
        duplicated=2,
        duplicated_pct=pytest.approx(200 / 7),
        workers=2,
        iterable=True,
        shards=1,
        num_workers=2,
    )
    assert pipeline_facts(manifest(batches([{"worker": -1, "fingerprint": "a"}]))).duplicates is None


def test_batch_bytes_in_flight_against_dev_shm():
    facts = batches([{"nbytes": n} for n in (100, 200, 300, 400, 1000)] + [{"nbytes": 0}])
    host = Host(shm_total_bytes=65_536, shm_free_bytes=10_000)
    run = manifest(facts, host=host, loader=LoaderConfig(id=0, num_workers=4, prefetch_factor=None))
    # p90 of 100..1000: 400 + 0.6 * 600 = 760 bytes; 2 in flight per worker (PyTorch's default): 1520 per worker.
    found = shared_memory_facts(run, every(facts))
    assert found == SharedMemoryFacts(
        batch_bytes_p50=300,
        batch_bytes_p90=760,
        prefetch_factor=2,
        shm_total_bytes=65_536,
        shm_free_bytes=10_000,
        ranks_sharing=1,
        recorded_workers=4,
        recorded_bytes=6080,
        max_workers=6,
    )
    assert in_flight_bytes(found, 3) == 4560 and in_flight_bytes(found, 3, prefetch_factor=4) == 9120
    assert fits(found, 6) and not fits(found, 7) and not fits(found, 4, prefetch_factor=4) and fits(None, 100)
    # Two ranks on the machine share /dev/shm: 5000 bytes each, 3 workers.
    shared = shared_memory_facts(manifest(facts, host=host, local_world_size=2), every(facts))
    assert shared is not None and (shared.max_workers, shared.ranks_sharing) == (3, 2) and not fits(shared, 4)
    assert shared_memory_facts(manifest(facts), every(facts)) is None  # /dev/shm unknown


def _unprofiled(step_ms: float, runq_ms: float) -> UnprofiledStats:
    return UnprofiledStats(
        reference_steps=10,
        step_ms=step_ms,
        profiled_steps=5,
        step_ms_p50=step_ms,
        profiled_step_ms=None,
        consumer_ms=step_ms,
        wait_ms=0.0,
        cpu_ms=step_ms,
        runq_ms=runq_ms,
        epoch=None,
    )


def loader_stats(tokenize_ms: float = 0.0, batch_ms: float = 10.0, in_main: bool = False, **changes) -> LoaderStats:
    """LoaderStats of batches of ``batch_ms`` (all CPU) with ``tokenize_ms`` of it in the tokenizer."""
    summary = lambda ms: Summary(ms, ms, ms)
    fields = {
        "batches": [],
        "batch": summary(batch_ms),
        "batch_cpu_ms_mean": batch_ms,
        "batch_runq_ms_mean": 0.0,
        "fetch": summary(0.0),
        "fetch_cpu_ms_mean": 0.0,
        "tokenize": summary(tokenize_ms),
        "tokenize_cpu_ms_mean": tokenize_ms,
        "collate": summary(0.0),
        "collate_cpu_ms_mean": 0.0,
        "tensors_per_batch": 3.0,
        "cpu_fraction": 1.0,
        "bound": "cpu",
        "in_main_process": in_main,
        "workers": [],
        "wait": None,
    }
    return LoaderStats(**{**fields, **changes})


def test_threads_of_workers_and_training_against_the_cores():
    processes = (
        ProcessMemory(pid=1, role="main", threads_peak=12, cpu_s=9.0, duration_s=3.0),
        ProcessMemory(pid=2, role="worker", worker_id=0, threads_peak=9, cpu_s=3.0, duration_s=2.0),
        ProcessMemory(pid=3, role="worker", worker_id=1, threads_peak=2, cpu_s=1.0, duration_s=0.0),
        ProcessMemory(pid=4, role="worker", worker_id=1),  # threads not read
    )
    host = Host(usable_cores=8, torch_threads=4, tokenizers_parallelism="true", omp_num_threads="4")
    run = manifest(
        memory=MemorySummary(processes=processes), host=host, local_world_size=2, versions={"tokenizers": "0.22.1"}
    )
    found = thread_facts(run, loader_stats(tokenize_ms=2.0), _unprofiled(step_ms=50.0, runq_ms=5.0))
    assert found is not None
    assert found.workers == (
        WorkerThreads(pid=2, worker_id=0, threads_peak=9, cpu_per_wall=1.5),
        WorkerThreads(pid=3, worker_id=1, threads_peak=2, cpu_per_wall=None),
    )
    # 8 cores shared by 2 ranks: 4 each; the training thread waited 5 of 50 ms for a core.
    assert (found.usable_cores, found.torch_threads, found.training_runq_pct) == (4, 4, 10.0)
    assert (found.tokenizers_parallelism, found.omp_num_threads, found.tokenizer_in_workers) == ("true", "4", True)
    assert found.tokenizers_imported
    # Without reference steps, the profiled steps' run-queue time; a tokenizer in the main process is not the workers'.
    profiled = manifest(
        memory=MemorySummary(processes=processes), main_process_cpu=MainProcessCpu(8, 40.0, 40.0, runq_ms_per_step=2.0)
    )
    fallback = thread_facts(profiled, loader_stats(tokenize_ms=2.0, in_main=True), None)
    assert fallback is not None and (fallback.training_runq_pct, fallback.tokenizer_in_workers) == (5.0, False)
    assert thread_facts(manifest(), None, None) is None


def _growing_worker(pid: int, worker_id: int, mib_per_batch: float) -> ProcessMemory:
    """Sampled every 100 ms from T0 + 50 ms; USS 100 MiB, then ``mib_per_batch`` more per batch made before it."""
    offsets = [50.0 + 100 * k for k in range(9)]
    return ProcessMemory(
        pid=pid,
        role="worker",
        worker_id=worker_id,
        first_sample_ns=T0,
        sample_ms=tuple(offsets),
        uss_mib=tuple(100 + mib_per_batch * k for k in range(9)),
    )


def test_worker_memory_against_the_samples_it_touched():
    # Worker 0 (pid 11) makes a batch of 4 samples every 100 ms from T0 + 100 ms; its memory sample at T0 + 50 ms
    # precedes its first batch (start-up) and is left out; then 8 points: 4, 8, ..., 32 samples, USS 104 ... 132 MiB.
    made = [{"worker": 0, "made_ns": T0 + 100_000_000 * k, "rows": 4} for k in range(1, 9)]
    # Its batches after worker 0 restarted (pid 21, T0 + 2 s) are the new process's; worker 1 has no batches.
    made += [{"worker": 0, "made_ns": T0 + 2_100_000_000 + k, "rows": 4} for k in range(3)]
    starts = (
        WorkerStart(pid=11, worker_id=0, loader=0, epoch=0, start_ns=T0),
        WorkerStart(pid=21, worker_id=0, loader=0, epoch=1, start_ns=T0 + 2_000_000_000),
    )
    processes = (_growing_worker(11, 0, 4.0), _growing_worker(12, 1, 4.0), _growing_worker(21, 0, 0.0))
    facts = batches(made)
    config = LoaderConfig(id=0, num_workers=2, batch_size=4, iterable_dataset=False)
    found = copy_on_read_facts(
        manifest(facts, loader=config, workers=starts, memory=MemorySummary(None, processes)), every(facts)
    )
    assert found is not None and (found.map_style, found.num_workers) == (True, 2)
    assert found.workers == (
        WorkerGrowth(
            pid=11, worker_id=0, points=8, samples_touched=32, growth_mib=28.0, kib_per_sample=1024.0, correlation=1.0
        ),
    )


def test_flat_memory_has_no_correlation_and_too_few_points_no_growth():
    made = [{"worker": 0, "made_ns": T0 + 100_000_000 * k, "rows": 0} for k in range(1, 9)]  # rows unknown: batch size
    facts = batches(made)
    run = manifest(facts, memory=MemorySummary(None, (_growing_worker(11, 0, 0.0),)))
    found = copy_on_read_facts(run, every(facts))
    assert found is not None and found.map_style is None
    (flat,) = found.workers
    assert (flat.samples_touched, flat.growth_mib, flat.kib_per_sample, flat.correlation) == (32, 0.0, 0.0, 0.0)
    few = batches(made[:2])
    assert copy_on_read_facts(manifest(few, memory=MemorySummary(None, (_growing_worker(11, 0, 1.0),))), [0]) is None


def test_three_readings_after_the_first_batch_tell_a_trend_two_do_not():
    # Batches of 4 samples at T0 + 100 ms ... 800 ms; readings every 100 ms from T0 + 50 ms, cut to the first three
    # after the first batch (150, 250, 350 ms: 4, 8, 12 samples, USS 104, 108, 112 MiB), then to two.
    made = [{"worker": 0, "made_ns": T0 + 100_000_000 * k, "rows": 4} for k in range(1, 9)]
    facts = batches(made)
    worker = _growing_worker(11, 0, 4.0)
    for kept, expected in ((4, 3), (3, None)):
        cut = replace(worker, sample_ms=worker.sample_ms[:kept], uss_mib=worker.uss_mib[:kept])
        found = copy_on_read_facts(manifest(facts, memory=MemorySummary(None, (cut,))), every(facts))
        if expected is None:
            assert found is None
        else:
            assert found is not None and [(g.points, g.samples_touched, g.growth_mib) for g in found.workers] == [
                (expected, 12, 8.0)
            ]


def test_training_threads_in_the_data_waits():
    """The step clock's thread columns over the steady reference steps, means per step; the workers' CPU is their
    batches' CPU times the batches a step takes; the usable cores shared by the node's ranks."""
    steps = 30
    clock = StepClock(
        phase=("before",) * 2 + ("profiled",) * 4 + ("after",) * (steps - 6),
        wall_ms=(60.0,) * steps,
        cpu_ms=(56.0,) * steps,
        runq_ms=(0.0,) * steps,
        wait_ms=(16.0,) * steps,
        batches=(1,) * steps,
        epoch_start=(True,) + (False,) * (steps - 1),
        wait_others_cpu_ms=(5.5,) * steps,
        thread_cpu_ms=(28.0,) * steps,
    )
    host = Host(usable_cores=4, torch_threads=2, omp_wait_policy="active")
    run = manifest(step_clock=clock, host=host, local_world_size=2)
    found = spin_facts(run, loader_stats(batch_ms=63.0))
    assert found is not None and found.steps == len(reference_step_indices(run)) > 0
    assert (found.step_ms, found.wait_ms, found.others_in_wait_ms) == (60.0, 16.0, 5.5)
    assert (found.thread_cpu_ms, found.others_cpu_ms, found.workers_cpu_ms) == (28.0, 28.0, 63.0)
    assert (found.num_workers, found.torch_threads, found.usable_cores, found.omp_wait_policy) == (2, 2, 2, "active")
    assert found.spinning_cores == pytest.approx(5.5 / 16)
    # Nothing to tell without workers, with the loader in the main process, or from a recording without the columns.
    no_workers = replace(run, loader=LoaderConfig(id=0, num_workers=0, batch_size=4))
    assert spin_facts(no_workers, loader_stats()) is None
    assert spin_facts(run, loader_stats(in_main=True)) is None
    older = replace(clock, wait_others_cpu_ms=(), thread_cpu_ms=())
    assert spin_facts(replace(run, step_clock=older), loader_stats()) is None
