"""``dlprof record --try-workers`` end to end: the counts tried inside the one running training, on the built-in
workload, a script over an IterableDataset, the Hugging Face Trainer (accelerate's DataLoader wrapper) and torchrun
with two ranks. Each run stops once its trials are done, and leaves no process behind."""

from __future__ import annotations

import json

import pytest
from conftest import (
    DATA_DIR,
    SCRIPTS_DIR,
    SMALL_WORKLOAD,
    free_port,
    leftover_processes,
    rank_manifests,
    run_dlprof,
    unique_copy,
)

from dlprof import analyze
from dlprof.core.manifest import PHASE_AFTER, PHASE_TRIAL
from dlprof.workloads.lora import DEFAULT_DATASET

pytestmark = pytest.mark.slow

LAUNCH = DATA_DIR / "launch"
#: A short window: these runs check what the trials record, not the window.
SHORT = ("--wait", "1", "--warmup", "1", "--active", "4", "--reference-steps", "4")


def _segments(manifest: dict) -> list[tuple[int, bool, int, int, int]]:
    return [
        (s["num_workers"], s["persistent_workers"], s["round"], s["first_step"], s["steps"])
        for s in manifest["trials"]["segments"]
    ]


def _check_segments(manifest: dict, expected: list[tuple[int, bool, int]]) -> None:
    """The segments ran in the planned order, one after another to the end of the run, as trial steps."""
    trials, clock = manifest["trials"], manifest["step_clock"]
    assert trials["incomplete"] is None, trials["incomplete"]
    segments = _segments(manifest)
    assert [s[:3] for s in segments] == expected
    for (*_, first, steps), (*_, following, _) in zip(segments, segments[1:]):
        assert first + steps == following
    last = segments[-1]
    assert last[3] + last[4] == len(clock["phase"]) and manifest["stopped_early"] and manifest["status"] == "complete"
    assert set(clock["phase"][segments[0][3] :]) == {PHASE_TRIAL}
    assert clock["phase"][segments[0][3] - 1] == PHASE_AFTER  # the reference steps came right before


def test_the_built_in_workload_tries_each_count_in_rounds(tmp_path):
    # The bundled data four times over: epochs of 428 batches are too long to be timed whole, so the reference steps
    # end soon (the run takes a third of the time), and the file's path finds the run's processes.
    dataset = tmp_path / f"{tmp_path.name}-data.json"
    dataset.write_text(json.dumps(json.loads(DEFAULT_DATASET.read_text()) * 4))
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "tried",
        *SMALL_WORKLOAD,
        "--num-workers",
        "2",
        "--dataset",
        str(dataset),
        "--try-workers",
        "0,2",
        "--trial-steps",
        "10",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "dlprof: trying num_workers 0,2 in 2 rounds of 2 segments, about" in done.stderr
    assert "dlprof: trial segment 4/4: num_workers 0 (round 2)" in done.stderr
    assert "then tried num_workers 0,2 in the training (4 segments in 2 rounds)" in done.stdout
    (manifest,) = rank_manifests(tmp_path / "tried")
    trials = manifest["trials"]
    assert (trials["counts"], trials["rounds"], trials["trial_steps"], trials["persistent"]) == ([0, 2], 2, 10, False)
    assert trials["loader"] == manifest["loader"]["id"]
    _check_segments(manifest, [(0, False, 0), (2, False, 0), (2, False, 1), (0, False, 1)])
    # Each segment: its refill allowance (twice the previous setting's queue and its own, 2 x 2 batches with 2
    # workers, and 5 settling steps) and the 10 timed steps: 0 after the recorded 2, 2 after 0, 2 after 2, 0 after 2.
    assert [s[4] for s in _segments(manifest)] == [23, 23, 31, 23]
    for segment in trials["segments"]:
        assert segment["first_batch_ms"] >= segment["start_ms"] >= 0 and not segment["at_epoch_start"]
        assert segment["drain_ms"] >= 0 and segment["shutdown_ms"] >= 0
    # The loader keeps its own settings as recorded; the trials' workers show among the run's workers.
    assert manifest["loader"]["num_workers"] == 2
    # Each switch names the workers it started, and the memory sampler read them: the setting's workers' memory.
    assert [len(s["worker_pids"]) for s in trials["segments"]] == [0, 2, 2, 0]
    sampled = {p["pid"] for p in manifest["memory"]["processes"]}
    assert all(set(s["worker_pids"]) <= sampled for s in trials["segments"])
    # The reference steps the report uses are the ones before the trials.
    (run,) = analyze(tmp_path / "tried").runs
    assert 0 < run.unprofiled.reference_steps < trials["segments"][0]["first_step"]
    memory = {s.num_workers: s.workers_pss_mib for s in run.trials.settings}
    assert memory[0] == 0.0 and memory[2] > 50, memory  # two workers holding torch and the tokenizer
    assert leftover_processes(str(dataset)) == []


def test_an_iterable_dataset_switches_where_epochs_start(tmp_path):
    script, log = unique_copy(SCRIPTS_DIR / "train_iterable.py", tmp_path), tmp_path / "epochs.log"
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "iterable",
        *SHORT,
        "--try-workers",
        "0,2",
        "--trial-steps",
        "5",
        "--",
        "python",
        str(script),
        "--log",
        str(log),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "switching where epochs start" in done.stderr
    (manifest,) = rank_manifests(tmp_path / "iterable")
    _check_segments(manifest, [(0, False, 0), (2, False, 0), (2, False, 1), (0, False, 1)])
    starts = {i for i, started in enumerate(manifest["step_clock"]["epoch_start"]) if started}
    assert all(s["at_epoch_start"] and s["first_step"] in starts for s in manifest["trials"]["segments"])
    # Every epoch, at any count, gave each sample once (the script checked; sharded with get_worker_info).
    lines = log.read_text().splitlines()
    assert len(lines) >= 8 and all(line.endswith(": ok") for line in lines), lines
    assert leftover_processes(str(script)) == []


def test_the_trainer_through_accelerate(tmp_path):
    """accelerate wraps the Trainer's DataLoader (DataLoaderShard reads a batch ahead): the switch happens inside."""
    script = unique_copy(LAUNCH / "train_trainer.py", tmp_path)
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "trainer",
        *SHORT,
        "--try-workers",
        "0,2",
        "--trial-steps",
        "6",
        "--",
        "accelerate",
        "launch",
        "--num_processes",
        "1",
        "--cpu",
        str(script),
        "--output-dir",
        str(tmp_path / "hf"),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (manifest,) = rank_manifests(tmp_path / "trainer")
    assert manifest["loader"]["created_by"] == "transformers" and manifest["loader"]["num_workers"] == 1
    _check_segments(manifest, [(0, False, 0), (2, False, 0), (2, False, 1), (0, False, 1)])
    assert leftover_processes(str(script)) == []


def test_torchrun_ranks_switch_at_the_same_steps(tmp_path):
    script = unique_copy(LAUNCH / "train_ddp.py", tmp_path)
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "ddp",
        *SHORT,
        "--try-workers",
        "0,1",
        "--try-persistent",
        "--trial-steps",
        "8",
        "--",
        "torchrun",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(script),
        "--steps",
        "100000",
        "--num-workers",
        "1",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("dlprof: trying num_workers") == 1  # rank 0 alone says it
    manifests = rank_manifests(tmp_path / "ddp")
    assert [m["rank"] for m in manifests] == [0, 1]
    order = [(0, False, 0), (1, False, 0), (1, True, 0), (1, True, 1), (1, False, 1), (0, False, 1)]
    for manifest in manifests:
        _check_segments(manifest, order)
        assert manifest["trials"]["notes"] == []
    assert _segments(manifests[0]) == _segments(manifests[1])
    assert len(manifests[0]["step_clock"]["phase"]) == len(manifests[1]["step_clock"]["phase"])
    assert leftover_processes(str(script)) == []
