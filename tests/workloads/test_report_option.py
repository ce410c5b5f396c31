"""The built-in workload's self-measurement (``--report``) and its slow-tokenizer knob (``--tokenizer-cost-ms``)."""

from __future__ import annotations

import json
import time

import pytest

from dlprof.core.errors import UsageError
from dlprof.workloads.lora import DEFAULT_DATASET, WorkloadOptions, check, load_tokenizer, main, parse_args
from dlprof.workloads.records import load_examples

REPORT_KEYS = {"steps_per_s_epochs", "steps_per_s_steady", "epochs", "steps_per_epoch", "step_ms", "wait_ms"}


def test_new_options_round_trip_and_stay_out_of_default_argv():
    options = WorkloadOptions(tokenizer_cost_ms=60.5, report="speed.json", num_workers=0, pad_to_max_length=True)
    assert parse_args(options.to_argv()) == options
    argv = WorkloadOptions().to_argv()
    assert "--report" not in argv and "--tokenizer-cost-ms" not in argv and "--pad-to-max-length" not in argv
    assert parse_args(["--tokenizer-cost-ms", "60"]).tokenizer_cost_ms == 60.0


@pytest.mark.parametrize("cost", [-1.0, float("nan")])
def test_check_rejects_a_negative_tokenizer_cost(cost):
    with pytest.raises(UsageError, match="--tokenizer-cost-ms"):
        check(WorkloadOptions(tokenizer_cost_ms=cost))


def test_report_times_whole_epochs_after_the_first(tmp_path, monkeypatch):
    # main() sets these with setdefault; monkeypatch restores the environment afterwards.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    dataset = tmp_path / "eight.json"
    dataset.write_text(json.dumps(json.loads(DEFAULT_DATASET.read_text(encoding="utf-8"))[:8]), encoding="utf-8")
    report = tmp_path / "speed.json"
    # 8 examples in batches of 4: 2 steps an epoch; 7 steps are 3 whole epochs and one step more.
    main(
        [
            "--dataset",
            str(dataset),
            "--batch-size",
            "4",
            "--max-length",
            "64",
            "--steps",
            "7",
            "--num-workers",
            "0",
            "--device",
            "cpu",
            "--report",
            str(report),
        ]
    )
    speed = json.loads(report.read_text())
    assert speed.keys() >= REPORT_KEYS
    assert speed["steps_per_epoch"] == 2 and speed["epochs"] == 3 and speed["epochs_measured"] == 2
    assert speed["steps"] == 7 and len(speed["epoch_s"]) == 4  # the partial fourth epoch is timed, not counted
    assert speed["steps_per_s_epochs"] > 0
    # 2-step epochs leave no step after each epoch's start-up: no steady speed inside an epoch.
    assert speed["steps_per_s_steady"] is None
    assert len(speed["step_ms"]) == len(speed["wait_ms"]) == 7 and speed["step_epoch"] == [0, 0, 1, 1, 2, 2, 3]
    # Whole epochs 2 and 3: 4 steps in their summed time.
    assert speed["steps_per_s_epochs"] == pytest.approx(4 / sum(speed["epoch_s"][1:3]), rel=1e-3)


def test_tokenizer_cost_is_cpu_time_inside_the_tokenizer_per_sample():
    from dlprof.workloads.sft import SupervisedDataset

    cost_ms = 15.0
    tokenizer = load_tokenizer(WorkloadOptions())
    examples = load_examples(DEFAULT_DATASET)[:6]
    plain = SupervisedDataset(examples, tokenizer, 512)
    slow = SupervisedDataset(examples, tokenizer, 512, tokenizer_cost_ms=cost_ms)
    cpu0 = time.thread_time()
    samples = [slow[i] for i in range(len(slow))]
    per_sample_ms = 1000 * (time.thread_time() - cpu0) / len(slow)
    assert per_sample_ms >= cost_ms
    assert samples == [plain[i] for i in range(len(plain))]  # slower, not different
    # Spent inside the tokenizer call (a profiler counts it as tokenizer time), half per call: prompt, response.
    cpu0 = time.thread_time()
    slow.tokenizer("hello", add_special_tokens=False)
    assert 1000 * (time.thread_time() - cpu0) >= cost_ms / 2
    assert "_encode_plus" not in vars(tokenizer)  # the caller's tokenizer is left as it was


def test_dataset_rejects_a_negative_tokenizer_cost():
    from dlprof.workloads.sft import SupervisedDataset

    with pytest.raises(ValueError, match="tokenizer_cost_ms"):
        SupervisedDataset([], None, 512, tokenizer_cost_ms=-1)


def test_steady_speed_is_steps_over_time_after_each_epochs_start_up():
    from dlprof.workloads.lora import SpeedLog

    # 2 workers, prefetch 2: a queue of 4 steps; each epoch leaves out 5 + 2 * 4 = 13 steps.
    log = SpeedLog(steps_per_epoch=16, queue_steps=4)
    epoch = [500.0] + [10.0] * 12 + [20.0, 40.0, 20.0]  # the start-up, then steps alternating around a slow one
    log.step_ms = [(e, ms) for e in range(3) for ms in epoch]
    # Epochs 1 and 2: 2 x 3 steps in 2 x 80 ms (not 1000 / the median step, 20 ms).
    assert log.steady_steps_per_s() == pytest.approx(1000 * 6 / 160)
