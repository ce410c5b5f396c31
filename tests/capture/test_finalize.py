"""Finalizing a record: each rank's recording read through one parser, calibration shared, the record's result typed."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from dlprof.capture import finalize
from dlprof.capture.rank_env import RankEnv, env_int
from dlprof.core import schema
from dlprof.core.errors import RecordError
from dlprof.core.manifest import Epoch, Handoff, Host, LoaderConfig, Schedule, StepClock, WorkerStartup
from dlprof.results.record import ClockReading, RankResult, RecordRequest


def rank_result(**changes) -> RankResult:
    result = RankResult(
        status=schema.STATUS_COMPLETE,
        error=None,
        rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=2,
        process_argv=("python", "-u", "train.py"),
        pid=4242,
        trace_file="kineto-rank0-4242.json",
        export_error=None,
        steps_run=12,
        schedule=Schedule(1, 1, 4, step_mode="optimizer"),
        window_start_ns=1_700_000_000_000_000_000,
        window_clock=(ClockReading(1_700_000_000_000_000_000, 5_000_000, 0),),
        step_clock=StepClock(
            phase=("before", "profiled"),
            wall_ms=(3.5, 4.0),
            cpu_ms=(1.0, 1.25),
            runq_ms=(0.0, 0.0),
            wait_ms=(0.5, 0.0),
            batches=(1, 1),
            epoch_start=(True, False),
            fork_probe=(False, False),
        ),
        stopped_early=True,
        finished_ns=1_700_000_000_100_000_000,
        loaders=(
            LoaderConfig(id=0, num_workers=2, timeout_s=0.0, epochs=(Epoch(1_700_000_000_000_000_000, 12.5, 8),)),
        ),
        host=Host(hostname="node-1", usable_cores=4, handoff=Handoff(0.05, 0.01)),
        versions={"dlprof": "0.3.0", "torch": "2.13.0"},
    )
    return replace(result, **changes)


def test_a_written_recording_reads_back_unchanged(tmp_path):
    path = tmp_path / "result-rank0-4242.json"
    original = rank_result()
    path.write_text(json.dumps(asdict(original), indent=1))  # as the recorder writes it
    assert finalize.read_rank_result(path) == original


def test_an_unreadable_recording_is_one_clear_error(tmp_path):
    path = tmp_path / "result-rank0-1.json"
    path.write_text('{"status": "complete", ')  # cut short
    with pytest.raises(RecordError, match=r"result-rank0-1.json: cannot read this process's recording"):
        finalize.read_rank_result(path)
    document = asdict(rank_result())
    del document["pid"]
    path.write_text(json.dumps(document))
    with pytest.raises(RecordError, match=r"not a recording this dlprof wrote \(result has no pid\)"):
        finalize.read_rank_result(path)
    path.write_text("[1, 2]")
    with pytest.raises(RecordError, match=r"result is not an object"):
        finalize.read_rank_result(path)


def test_a_value_out_of_range_is_unknown_and_named(tmp_path, capsys):
    document = asdict(rank_result())
    document["host"]["usable_cores"] = -4
    document["step_clock"]["wall_ms"] = [3.5, float("nan")]
    path = tmp_path / "result-rank0-4242.json"
    path.write_text(json.dumps(document))
    result = finalize.read_rank_result(path)
    assert result.host.usable_cores is None and result.host.hostname == "node-1"
    assert result.step_clock == StepClock()  # an entry skipped: the columns no longer line up
    err = capsys.readouterr().err
    assert "result.host.usable_cores = '-4' is not a valid int: read as unknown" in err
    assert "result.step_clock columns differ in length" in err


def test_ranks_of_one_machine_share_its_calibration():
    startup = WorkerStartup(fixed_ms=30.0, per_worker_ms=20.0)
    calibrated = rank_result(host=Host(hostname="node-1", handoff=Handoff(0.05, 0.01), worker_startup=startup))
    same_machine = rank_result(rank=1, local_rank=1, host=Host(hostname="node-1", usable_cores=4))
    elsewhere = rank_result(rank=2, host=Host(hostname="node-2"))
    shared = finalize._share_calibration([calibrated, same_machine, elsewhere])
    assert shared[0] == calibrated
    assert shared[1].host == Host(
        hostname="node-1", usable_cores=4, handoff=Handoff(0.05, 0.01), worker_startup=startup
    )
    assert shared[2] == elsewhere  # another machine's numbers are not this one's


def test_the_rank_environment_is_read_once_with_defaults():
    assert RankEnv.from_environ({}) == RankEnv(rank=0, world_size=1, local_rank=0, local_world_size=1)
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "two"}
    assert RankEnv.from_environ(env) == RankEnv(rank=3, world_size=4, local_rank=1, local_world_size=1)
    assert env_int("RANK", 0, {"RANK": ""}) == 0


def test_a_request_carries_its_schedule(tmp_path):
    request = RecordRequest(command=("python", "train.py"), out_dir=tmp_path, name="r", wait=2, warmup=1, active=5)
    assert request.schedule == Schedule(2, 1, 5)
    request.schedule.check()
