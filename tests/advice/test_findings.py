"""The input pipeline's findings (dlprof.advice.findings): each fires on hand-built facts with exact numbers and stays
quiet on facts just short of its threshold; the recommendation keeps its batches in /dev/shm."""

from __future__ import annotations

import dataclasses

import pytest
from analysis.test_pipeline import T0
from analysis.test_pipeline import batches as pipeline_batches
from analysis.test_pipeline import manifest as pipeline_manifest
from conftest import DATA_DIR

from dlprof.advice.findings import (
    copy_on_read_finding,
    few_shards_finding,
    input_findings,
    padding_finding,
    pretokenize_finding,
    pretokenized_inputs,
    shared_memory_finding,
    spin_finding,
    threads_finding,
    unsharded_finding,
)
from dlprof.advice.model import ModelInputs, predict
from dlprof.advice.rules import SHARED_MEMORY, _choose, advise
from dlprof.analysis.pipeline import pipeline_facts
from dlprof.core.manifest import BatchFacts, Host, LoaderConfig, MemorySummary, ProcessMemory
from dlprof.results.analysis import CATEGORIES, LoaderStats, StepBreakdown, Summary, Throughput
from dlprof.results.findings import (
    FINDING_COPY_ON_READ,
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
    PADDED_TO_LONGEST,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
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
from dlprof.results.trials import BASIS_IN_EPOCH, PaddingTrial, TrialsResult
from dlprof.trace.discover import load_run
from dlprof.workflows.analyze import analyze_run


def loader_stats(tokenize_ms: float = 0.0, batch_ms: float = 10.0) -> LoaderStats:
    """LoaderStats of batches of ``batch_ms`` (all CPU) made in workers, ``tokenize_ms`` of it in the tokenizer."""
    flat = lambda ms: Summary(ms, ms, ms)
    return LoaderStats(
        batches=[],
        batch=flat(batch_ms),
        batch_cpu_ms_mean=batch_ms,
        batch_runq_ms_mean=0.0,
        fetch=flat(0.0),
        fetch_cpu_ms_mean=0.0,
        tokenize=flat(tokenize_ms),
        tokenize_cpu_ms_mean=tokenize_ms,
        collate=flat(0.0),
        collate_cpu_ms_mean=0.0,
        tensors_per_batch=3.0,
        cpu_fraction=1.0,
        bound="cpu",
        in_main_process=False,
        workers=[],
        wait=None,
    )


def breakdown(step_ms: float = 100.0, **category_ms: float) -> StepBreakdown:
    flat = lambda ms: Summary(ms, ms, ms)
    return StepBreakdown([], flat(step_ms), {c: flat(category_ms.get(f"{c}_ms", 0.0)) for c in CATEGORIES})


def inputs(**overrides) -> ModelInputs:
    base = {"consumer_ms": 10.0, "batches_per_step": 1.0, "batch_ms": 30.0, "batch_cpu_ms": 30.0, "handoff_ms": 0.0}
    base |= {"usable_cores": None, "main_cpu_ms": 10.0, "worker_pss_mib": None, "available_ram_mib": None}
    return ModelInputs(**{**base, "recorded_workers": 0, **overrides})


FIXED = PaddingFacts(
    batches=2,
    padded_tokens=32,
    real_tokens=16,
    longest_tokens=20,
    padding_pct=50.0,
    mode=PADDED_FIXED,
    width=8,
    source="attention_mask",
)


def test_padding_beyond_the_longest_bounds_the_gain_from_the_tokens():
    # Forward and backward 40 of a 100 ms step; padded to its longest, a batch computes on 20 of 32 positions:
    # 0.4 * 12 / 32 = 15 % of the step goes, up to 1 / 0.85 - 1 = 17.6 % faster; packed, 0.4 * 16 / 32 = 20 %: 25 %.
    found = padding_finding(FIXED, breakdown(forward_ms=15.0, backward_ms=25.0, optimizer_ms=30.0))
    assert found is not None
    assert (found.id, found.severity, found.gain_basis, found.title) == (
        FINDING_PADDING,
        SEVERITY_WARNING,
        GAIN_UP_TO,
        "pad to the longest sequence",
    )
    assert found.gain_pct == pytest.approx(100 / 0.85 - 100)
    assert found.evidence == (
        "50 % of the positions computed on are padding (mean over 2 batches, told by attention_mask); batches are"
        " padded to a fixed width of 8, beyond their longest sequence: padded to it, they would compute on 62 % of the"
        " positions, packed (or grouped by length, which comes near it) on 50 %. Forward and backward take 40 % of the"
        " step: padding to the longest makes it up to 18 % faster, packing up to 25 %"
    )
    assert found.reason == "50 % of the tokens are padding" and "padding='longest'" in found.fix
    # Without forward and backward spans, the step less its data wait, optimizer and copies: (100 - 30 - 30) / 100.
    bare = padding_finding(FIXED, breakdown(data_wait_ms=30.0, optimizer_ms=30.0))
    assert bare is not None and bare.gain_pct == pytest.approx(100 / 0.85 - 100)


def _trials_with_padding(gain_pct, trusted=True, not_measured=None):
    rate = 20.0 * (1 + (gain_pct or 0) / 100)
    trimmed = None if gain_pct is None else Throughput(steps_per_s=rate, steps=80, seconds=3.0, spread_pct=0.0)
    padding = PaddingTrial(
        num_workers=2,
        persistent_workers=False,
        trimmed_pct=37.5,
        trimmed=trimmed,
        padded_steps_per_s=20.0,
        gain_pct=gain_pct,
        trusted=trusted,
    )
    return TrialsResult(
        rounds=2,
        rounds_planned=2,
        basis=BASIS_IN_EPOCH,
        settings=(),
        padding=padding if not_measured is None else None,
        padding_not_measured=not_measured,
    )


def test_padding_measured_by_the_trials_replaces_the_bound():
    step = breakdown(forward_ms=15.0, backward_ms=25.0, optimizer_ms=30.0)
    found = padding_finding(FIXED, step, _trials_with_padding(12.5))
    assert (found.gain_pct, found.gain_basis) == (12.5, GAIN_MEASURED)
    assert found.evidence.endswith(
        "padding to the longest makes it up to 18 % faster, packing up to 25 %; measured in this training at"
        " num_workers=2: batches trimmed to their longest sequence (only positions the loss ignores dropped, 38 % of"
        " the positions) trained at 22.50 steps/s against 20.00 padded (+12.5 %, inside an epoch)"
    )
    # Measured at no gain worth naming: the finding stays quiet, though the bound said up to 18 %.
    assert padding_finding(FIXED, step, _trials_with_padding(3.0)) is None
    # Not to be trusted: the bound stands, and the measurement is shown as such.
    shaky = padding_finding(FIXED, step, _trials_with_padding(3.0, trusted=False))
    assert (shaky.gain_basis, shaky.gain_pct) == (GAIN_UP_TO, pytest.approx(100 / 0.85 - 100))
    assert shaky.evidence.endswith("(+3.0 %, inside an epoch), too short or too spread to trust: the bound stands")
    # Not measured: why, and the bound.
    refused = padding_finding(FIXED, step, _trials_with_padding(None, not_measured="the trials did not trim: x"))
    assert refused.gain_basis == GAIN_UP_TO
    assert refused.evidence.endswith("; the trials did not trim: x: the bound stands")


def test_padding_stays_quiet_below_its_thresholds():
    step = breakdown(forward_ms=15.0, backward_ms=25.0)
    # Padded to the longest already (dynamic padding): half the positions are padding, but nothing to trim.
    dynamic = dataclasses.replace(FIXED, longest_tokens=32, mode=PADDED_TO_LONGEST)
    assert padding_finding(dynamic, step) is None
    # Under 20 % padding.
    assert padding_finding(dataclasses.replace(FIXED, padding_pct=19.9), step) is None
    # A step that token compute hardly shares: 0.1 * 12 / 32 = 3.75 % of it, under the 5 % gain.
    assert padding_finding(FIXED, breakdown(forward_ms=4.0, backward_ms=6.0)) is None


def test_pretokenizing_priced_at_the_recommended_count_and_at_zero_workers():
    # Half of a 30 ms batch is the tokenizer. At 0 workers: 10 + 30 = 40 ms -> 10 + 15 = 25 ms (+60 %); at 2 workers
    # the loader bound 15 ms -> the consumer's 10 ms (+50 %).
    loader = loader_stats(tokenize_ms=15.0, batch_ms=30.0)
    found = pretokenize_finding(loader, inputs(), 2)
    assert found is not None
    assert (found.id, found.gain_basis, found.gain_pct) == (FINDING_PRETOKENIZE, GAIN_PREDICTED, pytest.approx(50.0))
    assert found.evidence == (
        "the tokenizer takes 15.00 of 30.00 ms per batch (50 %); without it, num_workers=2 is predicted at 100.00"
        " steps/s instead of 66.67 (+50 %); at num_workers=0, 40.00 instead of 25.00 (+60 %)"
    )
    assert found.reason == "the tokenizer takes 50 % of a batch's time"


def test_pretokenized_predictions_keep_the_runs_anchor():
    # Recorded at 0 workers, measured 50 ms where the model says 40: every prediction x 1.25, with or without the
    # tokenizer (25 ms -> 31.25 ms), so the gain stays 60 %.
    anchored = inputs(measured_step_ms=50.0)
    without = pretokenized_inputs(anchored, loader_stats(tokenize_ms=15.0, batch_ms=30.0))
    assert without is not None and without.measured_step_ms == pytest.approx(31.25)
    assert predict(without, 0).step_ms == pytest.approx(31.25) and predict(anchored, 0).step_ms == pytest.approx(50.0)
    found = pretokenize_finding(loader_stats(tokenize_ms=15.0, batch_ms=30.0), anchored, 0)
    assert found is not None and found.gain_pct == pytest.approx(60.0) and "at num_workers=0," not in found.evidence


def test_a_fast_tokenizer_is_not_worth_pretokenizing():
    # The built-in workload's regime: 0.6 ms of tokenizer in a batch, a 50 ms step: under 5 % at any count.
    loader = loader_stats(tokenize_ms=0.6, batch_ms=2.0)
    assert pretokenize_finding(loader, inputs(consumer_ms=50.0, batch_ms=2.0, batch_cpu_ms=2.0), 0) is None
    assert pretokenize_finding(loader_stats(), inputs(), 2) is None  # no tokenizer spans
    assert pretokenize_finding(loader, None, 2) is None


DUPLICATES = DuplicateFacts(
    batches=40, duplicated=20, duplicated_pct=50.0, workers=2, iterable=True, shards=None, num_workers=2
)


def test_an_unsharded_iterable_dataset_is_an_error():
    found = unsharded_finding(DUPLICATES)
    assert found is not None
    assert (found.id, found.severity, found.gain_pct, found.gain_basis) == (
        FINDING_UNSHARDED_ITERABLE,
        SEVERITY_ERROR,
        None,
        GAIN_NONE,
    )
    assert found.evidence == (
        "20 of 40 batches (50 %) were made alike (same fingerprint) by another of the 2 workers in the same epoch:"
        " each worker reads the whole dataset, so the training sees its samples several times an epoch"
    )
    assert "get_worker_info()" in found.fix and "n_shards" in found.fix and "split_dataset_by_node" in found.fix


def test_duplicates_of_a_map_style_dataset_or_a_few_are_not_unsharding():
    assert unsharded_finding(dataclasses.replace(DUPLICATES, iterable=False)) is None
    assert unsharded_finding(dataclasses.replace(DUPLICATES, duplicated=3, duplicated_pct=7.5)) is None
    assert unsharded_finding(dataclasses.replace(DUPLICATES, workers=1)) is None


def test_more_workers_than_shards():
    config = LoaderConfig(id=0, num_workers=4, iterable_dataset=True, dataset_shards=2)
    found = few_shards_finding(config, 1)
    assert found is not None and found.severity == SEVERITY_WARNING
    assert found.evidence == (
        "the iterable dataset has 2 shard(s) for num_workers=4 (recorded): up to 2 worker(s) get no shard and stop"
    )
    assert found.fix.startswith("use num_workers <= 2")
    advised = few_shards_finding(dataclasses.replace(config, num_workers=2), 3)
    assert advised is not None and "num_workers=3 (advised): up to 1 worker(s)" in advised.evidence
    assert few_shards_finding(dataclasses.replace(config, dataset_shards=4), 4) is None
    assert few_shards_finding(dataclasses.replace(config, dataset_shards=None), 8) is None


MIB = 1024 * 1024
SHM = SharedMemoryFacts(
    batch_bytes_p50=16 * MIB,
    batch_bytes_p90=24 * MIB,
    prefetch_factor=2,
    shm_total_bytes=64 * MIB,
    shm_free_bytes=60 * MIB,
    ranks_sharing=1,
    recorded_workers=4,
    recorded_bytes=192 * MIB,
    max_workers=1,
)


def test_batches_in_flight_beyond_dev_shm():
    found = shared_memory_finding(SHM, 1, [0, 1, 2, 3, 4])
    assert found is not None and (found.id, found.severity, found.gain_pct) == (
        FINDING_SHARED_MEMORY,
        SEVERITY_ERROR,
        None,
    )
    assert found.evidence == (
        "a batch holds 24.0 MiB (p90; median 16.0 MiB), each worker keeps 2 in flight through /dev/shm: 48.0 MiB per"
        " worker, against 60.0 MiB free of 64.0 MiB; at most 1 worker(s) fit; num_workers=4 (as recorded) needs"
        " 192.0 MiB"
    )
    # 4 workers' 192 MiB with room to spare twice over: 384 MiB, 1 GiB.
    assert found.fix.startswith("give /dev/shm room: docker run --shm-size=1g (or --ipc=host")
    # The recorded count fits; a count the recommendation considered does not: a warning.
    fitting = dataclasses.replace(SHM, recorded_workers=1, recorded_bytes=48 * MIB)
    warned = shared_memory_finding(fitting, 1, [0, 1, 2, 3, 4])
    assert warned is not None and warned.severity == SEVERITY_WARNING
    assert warned.evidence.endswith("at most 1 worker(s) fit; the recommendation stays within it")
    assert shared_memory_finding(dataclasses.replace(fitting, max_workers=4), 1, [0, 1, 2, 3, 4]) is None


def test_the_recommendation_keeps_its_batches_in_dev_shm():
    # 3 workers are best (the three bounds meet at 10 ms); only 1 worker's batches fit.
    model = ModelInputs(
        consumer_ms=10.0,
        batches_per_step=1.0,
        batch_ms=30.0,
        batch_cpu_ms=30.0,
        handoff_ms=0.0,
        usable_cores=4,
        main_cpu_ms=10.0,
        worker_pss_mib=None,
        available_ram_mib=None,
    )
    predicted = [predict(model, n) for n in range(9)]
    assert _choose(model, predicted, True) == (3, "consumer")
    assert _choose(model, predicted, True, shm_cap=1) == (1, SHARED_MEMORY)
    assert _choose(model, predicted, True, shm_cap=0) == (0, SHARED_MEMORY)


def test_a_run_whose_batches_do_not_fit_is_advised_fewer_workers_with_trials_and_without():
    run = load_run(DATA_DIR / "tiny_trials_trace.json")
    report = analyze_run(run)
    assert report.advice.num_workers == 2
    loader_id = run.manifest.loader.id
    facts = BatchFacts(
        loader=(loader_id,) * 4,
        epoch=(0,) * 4,
        batch=(0, 1, 2, 3),
        worker=(0, 1, 0, 1),
        made_ns=(1, 2, 3, 4),
        rows=(0,) * 4,
        width=(0,) * 4,
        real_tokens=(0,) * 4,
        longest=(0,) * 4,
        nbytes=(MIB,) * 4,
        fingerprint=("a", "b", "c", "d"),
    )
    prefetch = run.manifest.loader.prefetch_factor or 2
    host = dataclasses.replace(run.manifest.host, shm_total_bytes=64 * MIB, shm_free_bytes=prefetch * MIB)
    manifest = dataclasses.replace(run.manifest, batches=facts, host=host)
    for trials in (None, report.trials):
        advice, _ = advise(
            report.steps, report.loader, None, manifest, report.info.batches_per_step, False, report.unprofiled,
            trials=trials,
        )  # fmt: skip
        assert advice.num_workers == 1 and advice.model_num_workers == 1
        (shm,) = [f for f in advice.findings if f.id == FINDING_SHARED_MEMORY]
        # The recorded count (1) fits, the counts the recommendation weighed beyond it do not.
        assert shm.severity == SEVERITY_WARNING and advice.bound == SHARED_MEMORY
    assert report.advice.findings == ()


THREADS = ThreadFacts(
    workers=(
        WorkerThreads(pid=2, worker_id=0, threads_peak=9, cpu_per_wall=1.5),
        WorkerThreads(pid=3, worker_id=1, threads_peak=9, cpu_per_wall=1.25),
        WorkerThreads(pid=4, worker_id=1, threads_peak=5, cpu_per_wall=1.0),  # worker 1 restarted: its most counts
    ),
    torch_threads=2,
    usable_cores=4,
    tokenizers_parallelism=None,
    omp_num_threads=None,
    tokenizer_in_workers=True,
    training_runq_pct=20.0,
)


def test_workers_with_thread_pools_oversubscribe_the_cores():
    found = threads_finding(THREADS)
    assert found is not None and (found.id, found.gain_basis) == (FINDING_THREADS, GAIN_UP_TO)
    # The training thread waited 20 % of the step for a core: up to 1 / 0.8 - 1 = 25 % faster.
    assert found.gain_pct == pytest.approx(25.0)
    assert found.evidence == (
        "2 of 2 workers ran thread pools (up to 9 threads, CPU/wall up to 1.50); with training's 2 intra-op thread(s)"
        " they want 18 threads on 4 usable core(s); the workers tokenize with TOKENIZERS_PARALLELISM unset; the"
        " training thread waited for a core 20 % of the step (the most this can give)"
    )
    assert found.fix == (
        "TOKENIZERS_PARALLELISM=false before the tokenizer is loaded; torch.set_num_threads(1) in worker_init_fn (or"
        " OMP_NUM_THREADS=1)"
    )
    quiet_queue = threads_finding(dataclasses.replace(THREADS, training_runq_pct=0.5, tokenizers_parallelism="false"))
    assert quiet_queue is not None and (quiet_queue.gain_pct, quiet_queue.gain_basis) == (None, GAIN_NONE)
    assert quiet_queue.fix.startswith("torch.set_num_threads(1)")
    imported = dataclasses.replace(THREADS, tokenizer_in_workers=False, tokenizers_imported=True)
    assert (
        "; the fast tokenizers library is loaded with TOKENIZERS_PARALLELISM unset;"
        in threads_finding(imported).evidence
    )


def test_single_threaded_workers_or_enough_cores_are_not_oversubscribed():
    single = tuple(dataclasses.replace(w, threads_peak=2, cpu_per_wall=0.98) for w in THREADS.workers)
    assert threads_finding(dataclasses.replace(THREADS, workers=single)) is None
    # Many threads, but one core's worth of CPU each (idle pools), and no tokenizer's pool.
    idle = tuple(dataclasses.replace(w, cpu_per_wall=1.0) for w in THREADS.workers)
    no_tokenizer_pool = dataclasses.replace(THREADS, workers=idle, tokenizers_parallelism="false")
    assert threads_finding(no_tokenizer_pool) is None
    # A tokenizer's pool on cores the training keeps busy seldom runs two threads at once: it counts all the same.
    assert threads_finding(dataclasses.replace(THREADS, workers=idle)) is not None
    # A worker tokenizing with its parallelism off keeps 4 threads: no pool.
    four = tuple(dataclasses.replace(w, threads_peak=4, cpu_per_wall=1.0) for w in THREADS.workers)
    assert threads_finding(dataclasses.replace(THREADS, workers=four)) is None
    assert threads_finding(dataclasses.replace(THREADS, usable_cores=18)) is None
    assert threads_finding(dataclasses.replace(THREADS, usable_cores=None)) is None


SPIN = SpinFacts(
    steps=108,
    step_ms=61.2,
    wait_ms=16.4,
    others_in_wait_ms=5.6,
    others_cpu_ms=28.1,
    thread_cpu_ms=27.8,
    workers_cpu_ms=62.9,
    num_workers=2,
    torch_threads=2,
    usable_cores=2,
)


def test_training_threads_spinning_against_the_workers():
    found = spin_finding(SPIN)
    assert found is not None and (found.id, found.severity) == (FINDING_SPIN_WAIT, "warning")
    # The gain is not told: the spin also holds parallel regions' barriers, which no count from the run bounds.
    assert (found.gain_pct, found.gain_basis, found.reason) == (None, GAIN_NONE, None)
    # 5.6 of 16.4 ms in the waits: 0.34 cores; (27.8 + 28.1 + 62.9) / 61.2 / 2 = 97 % of the cores.
    assert found.evidence == (
        "while the training thread waited for data (27 % of the step, 108 steady steps), its 2 intra-op threads kept"
        " 0.34 cores busy; none of the training's work runs then, so that is spin-waiting (OMP_WAIT_POLICY unset)."
        " The step asked 97 % of the 2 usable core(s): the training thread 27.8 ms of CPU, its other threads 28.1 ms,"
        " the 2 workers 62.9 ms. The gain is not told from one run (a passive policy also wakes the threads at every"
        " parallel region): relaunch with the fix and compare (dlprof diff)"
    )
    assert found.fix == (
        "OMP_WAIT_POLICY=PASSIVE in the training's environment (read when torch starts), or fewer intra-op threads"
        " (torch.set_num_threads(1) with 2 workers on 2 cores)"
    )
    eight = spin_finding(dataclasses.replace(SPIN, usable_cores=8, workers_cpu_ms=62.9 * 8, torch_threads=None))
    assert eight is not None and "torch.set_num_threads(6) with 2 workers on 8 cores" in eight.fix
    assert "its other threads kept" in eight.evidence


def test_no_spin_finding_without_spin_waits_or_contended_cores():
    assert spin_finding(dataclasses.replace(SPIN, others_in_wait_ms=1.5)) is None  # 0.09 cores: under the floor
    assert spin_finding(dataclasses.replace(SPIN, wait_ms=2.0, others_in_wait_ms=1.0)) is None  # waits 3 % of a step
    assert spin_finding(dataclasses.replace(SPIN, workers_cpu_ms=5.0, others_cpu_ms=20.0)) is None  # 43 % asked
    # Busy cores, but workers that want little: the spin takes nothing they need (and a passive policy costs).
    little = dataclasses.replace(SPIN, step_ms=16.0, wait_ms=2.6, others_in_wait_ms=3.2, thread_cpu_ms=14.1)
    assert spin_finding(dataclasses.replace(little, others_cpu_ms=15.1, workers_cpu_ms=1.5)) is None
    assert spin_finding(dataclasses.replace(little, others_cpu_ms=15.1, workers_cpu_ms=4.0)) is None  # 0.25 cores
    assert spin_finding(dataclasses.replace(little, others_cpu_ms=15.1, workers_cpu_ms=5.0)) is not None
    assert spin_finding(dataclasses.replace(SPIN, omp_wait_policy=" Passive")) is None  # the fix is in
    assert spin_finding(dataclasses.replace(SPIN, omp_wait_policy="ACTIVE")) is not None


GROWTH = CopyOnReadFacts(
    workers=(
        WorkerGrowth(
            pid=11, worker_id=0, points=8, samples_touched=32, growth_mib=28.0, kib_per_sample=1024.0, correlation=1.0
        ),
        WorkerGrowth(
            pid=12, worker_id=1, points=8, samples_touched=24, growth_mib=20.0, kib_per_sample=512.0, correlation=0.95
        ),
    ),
    map_style=True,
    num_workers=2,
)


def test_worker_memory_that_follows_the_samples_read_is_copy_on_read():
    config = LoaderConfig(id=0, num_workers=2, dataset_len=1000)
    found = copy_on_read_finding(GROWTH, config)
    assert found is not None and (found.id, found.gain_pct, found.gain_basis) == (FINDING_COPY_ON_READ, None, GAIN_NONE)
    # (28 + 20) / 2 = 24 MiB per worker, 48 over 2; (1024 + 512) / 2 = 768 KiB per sample. No projection over the
    # whole dataset: a worker's early growth overstates the rest (pages already copied are shared by later samples).
    assert found.evidence == (
        "worker memory (USS) grew 24 MiB per worker (48 MiB over 2 workers) in step with the samples they read: 768.0"
        " KiB per sample (correlation 0.95, up to 32 samples per worker): reading Python objects writes their reference"
        " counts, which copies their pages into"
        " every worker"
    )
    assert "numpy" in found.fix and "Arrow" in found.fix


def test_memory_that_grows_little_or_out_of_step_is_not_copy_on_read():
    loose = tuple(dataclasses.replace(w, correlation=0.5) for w in GROWTH.workers)
    assert copy_on_read_finding(dataclasses.replace(GROWTH, workers=loose), None) is None
    small = tuple(dataclasses.replace(w, growth_mib=15.0) for w in GROWTH.workers)
    assert copy_on_read_finding(dataclasses.replace(GROWTH, workers=small), None) is None
    assert copy_on_read_finding(dataclasses.replace(GROWTH, map_style=False), None) is None


def test_findings_come_largest_gain_first_then_by_severity():
    facts = PipelineFacts(padding=FIXED, duplicates=DUPLICATES, threads=THREADS, copy_on_read=GROWTH)
    step = breakdown(forward_ms=15.0, backward_ms=25.0)
    found = input_findings(facts, step, loader_stats(tokenize_ms=15.0, batch_ms=30.0), inputs(), 2, [0, 1, 2], None)
    assert [f.id for f in found] == [
        FINDING_PRETOKENIZE,  # 50 %
        FINDING_THREADS,  # up to 25 %
        FINDING_PADDING,  # up to 17.6 %
        FINDING_UNSHARDED_ITERABLE,  # error
        FINDING_COPY_ON_READ,  # warning
    ]
    assert input_findings(PipelineFacts(), step, None, None, None, [], None) == ()


def test_no_finding_fires_on_the_hand_written_runs_but_the_tokenizer_heavy_one():
    for name in ("tiny_trials_trace.json", "tiny_cuda_trace.json", "kineto_pt19_resnet50_workers4_step7.json.gz"):
        assert analyze_run(load_run(DATA_DIR / name)).advice.findings == ()
    # The hand-written dlprof run's tokenizer takes 0.3 of a 0.7 ms batch, its step 0.6 ms: pre-tokenizing pays.
    (found,) = analyze_run(load_run(DATA_DIR / "tiny_dlprof_trace.json")).advice.findings
    assert found.id == FINDING_PRETOKENIZE and found.gain_pct == pytest.approx(32.2, abs=0.1)


def _faulty_manifest(**changes):
    """A run with every fault: 2 workers of an unsharded iterable dataset (each yields the same batches), padded to
    512 positions where the longest is 128, 64 MiB batches against 100 MiB of /dev/shm, 9-thread workers on 4 cores."""
    made = []
    for k in range(4):
        for worker in (0, 1):
            made.append(
                {"worker": worker, "fingerprint": f"f{k}", "rows": 4, "width": 512, "real_tokens": 256}
                | {"longest": 128, "nbytes": 64 * MIB, "made_ns": T0 + 100_000_000 * (k + 1) + worker}
            )
    processes = tuple(
        ProcessMemory(pid=10 + w, role="worker", worker_id=w, threads_peak=9, cpu_s=3.0, duration_s=2.0) for w in (0, 1)
    )
    fields = {
        "loader": LoaderConfig(id=0, num_workers=2, batch_size=4, iterable_dataset=True, prefetch_factor=2),
        "host": Host(usable_cores=4, torch_threads=4, shm_total_bytes=128 * MIB, shm_free_bytes=100 * MIB),
        "memory": MemorySummary(1000, processes),
    }
    return pipeline_manifest(pipeline_batches(made, padding_source="attention_mask"), **{**fields, **changes})


def test_the_facts_of_a_faulty_run_make_its_findings():
    manifest = _faulty_manifest()
    facts = pipeline_facts(manifest)
    step = breakdown(forward_ms=30.0, backward_ms=30.0)
    found = input_findings(facts, step, None, None, 0, [0, 1, 2], manifest.loader)
    # Padding: 256 of 2048 positions real (87.5 % padding), 512 if padded to the longest: 0.6 * 0.75 = 45 % of the
    # step goes, up to 82 % faster.
    assert [(f.id, f.severity) for f in found] == [
        (FINDING_PADDING, SEVERITY_WARNING),
        (FINDING_UNSHARDED_ITERABLE, SEVERITY_ERROR),
        (FINDING_SHARED_MEMORY, SEVERITY_ERROR),
        (FINDING_THREADS, SEVERITY_WARNING),
    ]
    assert found[0].gain_pct == pytest.approx(100 / 0.55 - 100)
    assert found[1].evidence.startswith("4 of 8 batches (50 %) were made alike")
    assert "at most 0 worker(s) fit; num_workers=2 (as recorded) needs 256.0 MiB" in found[2].evidence
    assert "they want 20 threads on 4 usable core(s)" in found[3].evidence


def test_a_healthy_run_has_no_findings():
    made = [
        {"worker": k % 2, "fingerprint": f"f{k}", "rows": 4, "width": 100, "real_tokens": 300, "longest": 100}
        | {"nbytes": 10_000, "made_ns": T0 + k}
        for k in range(8)
    ]
    processes = tuple(
        ProcessMemory(pid=10 + w, role="worker", worker_id=w, threads_peak=2, cpu_s=1.9, duration_s=2.0) for w in (0, 1)
    )
    manifest = pipeline_manifest(
        pipeline_batches(made, padding_source="attention_mask"),
        loader=LoaderConfig(id=0, num_workers=2, batch_size=4, iterable_dataset=False),
        host=Host(usable_cores=2, torch_threads=2, shm_total_bytes=64 * MIB, shm_free_bytes=64 * MIB),
        memory=MemorySummary(1000, processes),
    )
    found = input_findings(
        pipeline_facts(manifest), breakdown(forward_ms=30.0, backward_ms=30.0), None, None, 2, [0, 1, 2, 3, 4], None
    )
    assert found == ()
