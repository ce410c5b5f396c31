"""``DlprofCallback(try_workers=..., then=...)``: the in-process trials inside a real ``Trainer.train()``, as ``dlprof
record --try-workers ... --then`` runs them, and the callback's arguments for them checked before anything starts."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import (
    DATA_DIR,
    assert_chose_the_headline,
    check_recorded_traces,
    free_port,
    leftover_processes,
    load_trace,
    rank_manifests,
    trace_files,
    unique_copy,
)

from dlprof.core import schema
from dlprof.core.errors import UsageError
from integrations.test_transformers import _trainer, fresh_process  # noqa: F401 (a fixture)

#: A short window and few reference steps; trial segments of 6 timed steps in 2 rounds.
SHORT = {"wait": 1, "warmup": 1, "active": 4, "reference_steps": 4, "trial_steps": 6}


def _manifest(run_dir) -> dict:
    (path,) = trace_files(run_dir)  # the trials' traces written while it trained were replaced, not added to
    return load_trace(run_dir)[schema.MANIFEST_KEY]


@pytest.mark.slow
def test_then_best_trains_on_at_the_setting_the_trials_recommend(tmp_path, fresh_process, capsys):  # noqa: F811
    import dlprof
    from dlprof.hf import DlprofCallback

    callback = DlprofCallback(out_dir=tmp_path, name="best", try_workers=[0, 1], then="best", **SHORT)
    trainer = _trainer(tmp_path, callback, dataset_len=4 * 1000, max_steps=300)
    trainer.train()
    assert trainer.state.global_step == 300  # the Trainer's own end, not the trials'
    err = capsys.readouterr().err
    assert "dlprof: the trials are done: " in err, err
    said = re.search(r"--then best: training on at num_workers=(\d+)", err)
    assert said is not None, err

    run_dir = tmp_path / "best"
    manifest = _manifest(run_dir)
    check_recorded_traces(run_dir)
    assert manifest["status"] == "complete" and manifest["error"] is None
    trials = manifest["trials"]
    assert {s["num_workers"] for s in trials["segments"]} == {0, 1} and trials["rounds"] == 2
    then = trials["then"]
    assert (then["mode"], then["num_workers"]) == ("best", int(said.group(1)))
    phases = manifest["step_clock"]["phase"]
    assert len(phases) == 300 and phases[-1] == "tuned" and phases.index("tuned") == then["trials_end_step"]
    assert then["first_step"] is not None and then["first_step"] >= then["trials_end_step"]
    assert "try_workers=0,1" in manifest["command"] and "then=best" in manifest["command"]
    run = dlprof.analyze(run_dir).runs[0]
    tuned = run.trials.tuned
    assert tuned is not None and tuned.steps == 300 - then["trials_end_step"]
    assert (tuned.mode, tuned.num_workers) == ("best", then["num_workers"])
    assert_chose_the_headline(err, own=1, chosen=then["num_workers"])  # what the trials' analysis recommended


@pytest.mark.slow
def test_then_stop_stops_the_trainer_after_the_trials(tmp_path, fresh_process):  # noqa: F811
    from dlprof.hf import DlprofCallback

    callback = DlprofCallback(out_dir=tmp_path, name="stop", try_workers="0,1", **SHORT)
    trainer = _trainer(tmp_path, callback, dataset_len=4 * 1000, max_steps=1000)
    trainer.train()  # no SystemExit: it would end a notebook's kernel
    manifest = _manifest(tmp_path / "stop")
    assert trainer.state.global_step == len(manifest["step_clock"]["phase"]) < 1000
    assert manifest["status"] == "complete" and manifest["stopped_early"] is True
    trials = manifest["trials"]
    assert trials["then"] is None and trials["incomplete"] is None
    assert {s["num_workers"] for s in trials["segments"]} == {0, 1}
    assert manifest["step_clock"]["phase"][-1] == "trial"


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"then": "fastest"}, "then='fastest': give one of 'stop', 'best', 'keep'"),
        ({"then": "best"}, "then='best' trains on after trials: give try_workers=[0, 2, 4] too"),
        ({"try_workers": "0,x"}, "try_workers='0,x': give comma-separated whole numbers >= 0"),
        ({"try_workers": [0, 0]}, "a count is given twice"),
        ({"try_workers": [0, 2], "stop_after_window": True}, "stop_after_window=True with try_workers"),
        ({"try_workers": [0, 2], "trial_steps": 0}, "trial_steps=0: must be >= 1"),
        ({"try_workers": [0, 2], "trial_rounds": 0}, "trial_rounds=0: must be >= 1"),
    ],
)
def test_bad_trial_arguments_are_one_clear_error_and_leave_nothing(tmp_path, fresh_process, arguments, said):  # noqa: F811
    from dlprof.hf import DlprofCallback

    with pytest.raises(UsageError) as raised:
        DlprofCallback(out_dir=tmp_path, name="bad", **arguments)
    message = str(raised.value)
    assert message.startswith("DlprofCallback: ") and said in message and "--" not in message, message
    assert list(tmp_path.iterdir()) == []


def test_trials_under_several_ranks_need_one_name(tmp_path, fresh_process, monkeypatch):  # noqa: F811
    from dlprof.hf import DlprofCallback

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="several ranks: give name=, the same on every rank"):
        DlprofCallback(out_dir=tmp_path, try_workers=[0, 2])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_every_rank_follows_rank_0s_plan(tmp_path):
    """Two ranks of a Trainer launched by torchrun (as accelerate's multi-process launcher does on GPUs), each with its
    DlprofCallback: rank 0 opens the run, rank 1 joins it; one choice, both ranks switch to it at the same step and
    train to the Trainer's end; rank 0 merges both."""
    script = unique_copy(DATA_DIR / "launch" / "train_trainer.py", tmp_path)
    command = ["torchrun", "--nproc-per-node", "2", "--master-port", str(free_port()), str(script)]
    command += ["--max-steps", "300", "--output-dir", str(tmp_path / "hf"), "--callback-out", str(tmp_path)]
    command += ["--callback-try-workers", "0,1", "--callback-then", "best"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("dlprof: the trials are done: ") == 1, done.stderr  # rank 0 chose, once
    said = re.search(r"--then best: training on at num_workers=(\d+)", done.stderr)
    assert said is not None, done.stderr
    manifests = rank_manifests(tmp_path / "callback")
    assert [m["rank"] for m in manifests] == [0, 1]
    thens = [m["trials"]["then"] for m in manifests]
    assert thens[0] == thens[1] and thens[0]["num_workers"] == int(said.group(1)), thens
    assert all(m["status"] == "complete" for m in manifests)
    assert [len(m["step_clock"]["phase"]) for m in manifests] == [300, 300]
    assert list(schema.scratch_dirs(tmp_path / "callback")) == []
    assert leftover_processes(str(script)) == []
