"""``dlprof record --try-workers ... --then best|keep`` end to end: after the trials the training goes on to its own end
at the chosen setting (a map-style Dataset, and an IterableDataset that switches where epochs start), the trials'
traces are written and read while it trains, and SIGTERM after the trials keeps them. No batch is lost or repeated,
and no process is left behind."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    DATA_DIR,
    SCRIPTS_DIR,
    assert_chose_the_headline,
    free_port,
    leftover_processes,
    rank_manifests,
    run_dlprof,
    trace_files,
    unique_copy,
)

from dlprof import analyze
from dlprof.core import schema
from dlprof.core.manifest import PHASE_TRIAL, PHASE_TUNED

pytestmark = pytest.mark.slow

#: A short window: these runs check what happens after the trials.
SHORT = ("--wait", "1", "--warmup", "1", "--active", "4", "--reference-steps", "4")
#: Steps of a training that must outlast the trials' analysis in ``dlprof record``'s process, on a loaded CI machine
#: too (400 steps, ~1.5 s after the trials, once did not: the switch never came), and give the speed after the switch
#: its 2 s of steady steps on a fast one: train_then.py's steps are bound by its sleeps (~2.2 ms at 2 workers), and a
#: quarter of each epoch's steps are its start's transient, so 1200 steps (~770 at the setting) timed under 2 s there.
#: A whole number of epochs (the epochs' log below).
STEPS = 3200
#: train_then.py's epochs: 16 batches of 4 of its 64 samples.
EPOCH_STEPS = 16


def _manifest(run_dir: Path) -> dict:
    (path,) = trace_files(run_dir)  # the trials' traces written while it trained were replaced, not added to
    return json.loads(gzip.decompress(path.read_bytes()))["dlprof"]


def _check_tuned(manifest: dict) -> dict:
    """The trials ran whole, then every later step is ``tuned``, the switch after the trials' end; returns ``then``."""
    trials, phases = manifest["trials"], manifest["step_clock"]["phase"]
    assert trials["incomplete"] is None, trials["incomplete"]
    then = trials["then"]
    last = trials["segments"][-1]
    assert then["trials_end_step"] == last["first_step"] + last["steps"]
    assert set(phases[trials["segments"][0]["first_step"] : then["trials_end_step"]]) == {PHASE_TRIAL}
    assert set(phases[then["trials_end_step"] :]) == {PHASE_TUNED}
    assert then["error"] is None and then["trials_end_step"] <= then["first_step"] < len(phases), then
    assert manifest["status"] == "complete" and not manifest["stopped_early"]
    return then


def test_best_trains_on_to_the_end_at_the_recommended_setting(tmp_path):
    script, log = unique_copy(SCRIPTS_DIR / "train_then.py", tmp_path), tmp_path / "epochs.log"
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "best",
        *SHORT,
        "--try-workers",
        "0,2",
        "--trial-steps",
        "8",
        "--then",
        "best",
        "--",
        "python",
        str(script),
        "--steps",
        str(STEPS),
        "--log",
        str(log),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "dlprof: the trials are done: " in done.stderr
    said = re.search(r"--then best: training on at num_workers=(\d+)", done.stderr)
    assert said is not None, done.stderr
    manifest = _manifest(tmp_path / "best")
    then = _check_tuned(manifest)
    assert (then["mode"], then["num_workers"]) == ("best", int(said.group(1)))
    assert len(manifest["step_clock"]["phase"]) == STEPS  # the script's own end, not dlprof's
    # What dlprof chose is what the trials' analysis recommended (the headline it printed then); the final report,
    # with the steps after the trials too, may weigh the settings otherwise (on this tiny workload they nearly tie).
    assert_chose_the_headline(done.stderr, own=2, chosen=then["num_workers"])
    (run,) = analyze(tmp_path / "best").runs
    tuned = run.trials.tuned
    assert tuned is not None and tuned.steps == STEPS - then["trials_end_step"]
    assert (tuned.mode, tuned.num_workers) == ("best", then["num_workers"])
    assert tuned.steps_at_setting == STEPS - then["first_step"]
    # Hundreds of steps at the setting are timed; whether it held against its trial is said, or why not (8-step
    # trials on this tiny workload may be too unsteady to hold anything against).
    assert tuned.speed is not None and tuned.speed.steps > 100
    assert (tuned.held is None) == (tuned.error is not None), tuned
    lines = log.read_text().splitlines()
    # The last epoch ends with the last step, before its line. No batch lost or repeated:
    assert len(lines) == STEPS // EPOCH_STEPS - 1 and all(line.endswith(": ok") for line in lines), lines
    assert leftover_processes(str(script)) == []


def test_keep_goes_back_to_the_scripts_own_setting_where_an_epoch_starts(tmp_path):
    script, log = unique_copy(SCRIPTS_DIR / "train_iterable.py", tmp_path), tmp_path / "epochs.log"
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "keep",
        *SHORT,
        "--try-workers",
        "0,1",
        "--trial-steps",
        "5",
        "--then",
        "keep",
        "--",
        "python",
        str(script),
        "--epochs",
        "40",
        "--log",
        str(log),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "--then keep: training on at the script's own settings" in done.stderr
    manifest = _manifest(tmp_path / "keep")
    then = _check_tuned(manifest)
    assert (then["mode"], then["num_workers"], then["persistent_workers"]) == ("keep", 2, False)
    assert manifest["step_clock"]["epoch_start"][then["first_step"]]  # an IterableDataset switches at epoch starts
    lines = log.read_text().splitlines()
    assert len(lines) == 40 and all(line.endswith(": ok") for line in lines), lines
    assert leftover_processes(str(script)) == []


def _wait_for_trace(run_dir: Path, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = trace_files(run_dir)
        if found:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no trace in {run_dir} after {timeout_s} s")


#: Runs Python with SIGXFSZ ignored (a write past the file-size limit then fails with EFBIG, as one on a full disk
#: fails with ENOSPC, instead of killing the process): ``[sys.executable, "-c", IGNORE_SIGXFSZ, "-m", ...]``.
IGNORE_SIGXFSZ = (
    "import os, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
    " os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
)


def _record_until_stopped(
    tmp_path: Path, name: str, python: tuple[str, ...] = (sys.executable,), **popen
) -> tuple[Path, subprocess.Popen]:
    """``dlprof record --try-workers 0,2 --then best`` of train_then.py, which trains until it is stopped, started
    into ``tmp_path/name`` by ``python``; returns the script's copy (its processes are looked for afterwards) and the
    record."""
    script = unique_copy(SCRIPTS_DIR / "train_then.py", tmp_path)
    command = [*python, "-m", "dlprof", "record", "--out", str(tmp_path), "--name", name, *SHORT]
    command += ["--try-workers", "0,2", "--trial-steps", "5", "--then", "best", "--"]
    command += ["python", str(script), "--log", str(tmp_path / "epochs.log")]
    return script, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


@contextlib.contextmanager
def _never_left(record: subprocess.Popen, group: bool = False) -> Iterator[None]:
    """Kills ``record`` (its process group with ``group``) if it is still running when the block is left."""
    try:
        yield
    finally:
        if record.poll() is None:
            if group:
                os.killpg(record.pid, signal.SIGKILL)
            else:
                record.kill()
            record.wait()


def test_the_trials_are_read_while_it_trains_and_sigterm_keeps_them(tmp_path):
    script, record = _record_until_stopped(tmp_path, "live")
    with _never_left(record):
        interim = _wait_for_trace(tmp_path / "live", 300)
        document = json.loads(gzip.decompress(interim.read_bytes()))["dlprof"]
        assert document["status"] == "training" and document["trials"]["then"]["mode"] == "best"
        # A second reader is never refused while the training goes on.
        read = run_dlprof("analyze", str(tmp_path / "live"))
        assert read.returncode == 0, read.stderr
        assert "the training goes on after the trials" in read.stdout
        time.sleep(3)  # the switch, and steps after it
        record.send_signal(signal.SIGTERM)
        stdout, stderr = record.communicate(timeout=120)
    assert record.returncode == 128 + signal.SIGTERM, stderr
    manifest = _manifest(tmp_path / "live")  # one trace: the final one replaced the trials' traces
    assert manifest["status"] == "partial" and "SIGTERM" in (manifest["error"] or ""), manifest["error"]
    trials = manifest["trials"]
    assert trials["incomplete"] is None and len(trials["segments"]) == 4
    assert trials["then"]["first_step"] is not None, trials["then"]
    assert PHASE_TUNED in manifest["step_clock"]["phase"]
    assert list(schema.scratch_dirs(tmp_path / "live")) == []  # nothing half-written left
    assert leftover_processes(str(script)) == []


def test_a_training_killed_after_the_trials_keeps_them(tmp_path):
    """SIGKILL of the training process while it trains on: what it wrote when the trials ended stands in."""
    script, record = _record_until_stopped(tmp_path, "killed")
    with _never_left(record):
        interim = _wait_for_trace(tmp_path / "killed", 300)
        training_pid = int(re.search(r"_(\d+)\.\d+\.pt\.trace\.json\.gz$", interim.name).group(1))
        time.sleep(2)
        os.kill(training_pid, signal.SIGKILL)
        stdout, stderr = record.communicate(timeout=120)
    assert record.returncode == 128 + signal.SIGKILL, stderr
    assert "killed by SIGKILL" in stderr
    manifest = _manifest(tmp_path / "killed")  # one trace: the final one replaced the trials' traces
    assert manifest["status"] == "partial" and "SIGKILL" in (manifest["error"] or ""), manifest["error"]
    trials = manifest["trials"]
    assert trials["incomplete"] is None and len(trials["segments"]) == 4
    assert trials["then"]["mode"] == "best" and trials["then"]["trials_end_step"] == len(
        manifest["step_clock"]["phase"]
    )
    assert list(schema.scratch_dirs(tmp_path / "killed")) == []
    assert leftover_processes(str(script)) == []
    read = run_dlprof("analyze", str(tmp_path / "killed"))  # the trials are analysed as any partial run's
    assert read.returncode == 0 and "Measured in this training: in-process trials" in read.stdout, read.stdout
    assert "--then best): no step after the trials was recorded" in read.stdout


def test_ctrl_c_after_the_trials_keeps_them(tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole process group) while the training goes on after its trials: one trace,
    partial, with the trials and the steps after them; no scratch and no process left."""
    # In a process group of its own, as a terminal starts a command.
    script, record = _record_until_stopped(tmp_path, "ctrl-c", start_new_session=True)
    with _never_left(record, group=True):
        _wait_for_trace(tmp_path / "ctrl-c", 300)
        time.sleep(3)  # the switch, and steps after it
        os.killpg(record.pid, signal.SIGINT)
        stdout, stderr = record.communicate(timeout=120)
    assert record.returncode == 130, stderr
    manifest = _manifest(tmp_path / "ctrl-c")  # one trace: the final one replaced the trials' traces
    assert manifest["status"] == "partial" and manifest["error"] == "interrupted (KeyboardInterrupt)", manifest["error"]
    trials = manifest["trials"]
    assert trials["incomplete"] is None and len(trials["segments"]) == 4 and trials["then"]["mode"] == "best"
    assert PHASE_TUNED in manifest["step_clock"]["phase"]
    assert list(schema.scratch_dirs(tmp_path / "ctrl-c")) == []
    assert leftover_processes(str(script)) == []


def test_a_full_disk_after_the_trials_keeps_them(tmp_path):
    """The disk fills while the training goes on after its trials (here: dlprof record's file-size limit lowered to 0
    once the trials' traces are written; a full disk refuses its writes alike), then the training is stopped: the final
    traces cannot be written. The trials' traces stay, read as partial; one line says so; nothing half-written, no
    process left."""
    script, record = _record_until_stopped(tmp_path, "full", python=(sys.executable, "-c", IGNORE_SIGXFSZ))
    with _never_left(record):
        interim = _wait_for_trace(tmp_path / "full", 300)
        kept = interim.read_bytes()
        time.sleep(2)  # the switch, and steps after it
        resource.prlimit(record.pid, resource.RLIMIT_FSIZE, (0, 0))  # dlprof record's own writes: the training's run
        record.send_signal(signal.SIGTERM)
        stdout, stderr = record.communicate(timeout=120)
    assert record.returncode == 2, stderr
    last = stderr.strip().splitlines()[-1]
    assert (
        last.startswith(f"dlprof: error: {tmp_path / 'full'}") and "could not write the trace (File too large)" in last
    )
    assert last.endswith(
        "free disk space or choose another --out; the trials' traces written when they ended are kept in"
        f" {tmp_path / 'full'}"
    )
    assert trace_files(tmp_path / "full") == [interim] and interim.read_bytes() == kept  # untouched
    assert list(schema.scratch_dirs(tmp_path / "full")) == [] and not list((tmp_path / "full").glob("*.tmp"))
    assert leftover_processes(str(script)) == []
    read = run_dlprof("analyze", str(tmp_path / "full"))  # the trials, as a partial run's
    assert read.returncode == 0 and "note: the recording is partial" in read.stdout, read.stdout
    assert "Measured in this training: in-process trials" in read.stdout
    assert (
        "--then best): no step after the trials was recorded: this is the recording written when the trials"
        in read.stdout
    )


def test_torchrun_ranks_switch_to_the_best_at_the_same_step(tmp_path):
    script = unique_copy(DATA_DIR / "launch" / "train_ddp.py", tmp_path)
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "ddp",
        *SHORT,
        "--try-workers",
        "0,1",
        "--trial-steps",
        "8",
        "--then",
        "best",
        "--",
        "torchrun",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(script),
        "--steps",
        str(STEPS),
        "--num-workers",
        "1",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("dlprof: the trials are done: ") == 1  # one choice for the job
    manifests = rank_manifests(tmp_path / "ddp")
    assert [m["rank"] for m in manifests] == [0, 1]
    thens = [_check_tuned(m) for m in manifests]
    assert thens[0] == thens[1], thens  # the same setting, from the same step, on both ranks
    assert [len(m["step_clock"]["phase"]) for m in manifests] == [STEPS, STEPS]
    assert leftover_processes(str(script)) == []


def test_two_ranks_of_a_trainer_train_on_at_the_best(tmp_path):
    """Two ranks of a Hugging Face Trainer (accelerate's DataLoaderShard reads a batch ahead), launched by torchrun, as
    accelerate's multi-process launcher does on GPUs (on CPUs it starts one): one choice, and both ranks switch to it
    at the same step, then train to the Trainer's own end."""
    script = unique_copy(DATA_DIR / "launch" / "train_trainer.py", tmp_path)
    launch = ["torchrun", "--nproc-per-node", "2", "--master-port", str(free_port())]
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "trainer",
        *SHORT,
        "--try-workers",
        "0,1",
        "--trial-steps",
        "6",
        "--then",
        "best",
        "--",
        *launch,
        str(script),
        "--max-steps",
        "300",
        "--output-dir",
        str(tmp_path / "hf"),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("dlprof: the trials are done: ") == 1
    said = re.search(r"--then best: training on at num_workers=(\d+)", done.stderr)
    assert said is not None, done.stderr
    manifests = rank_manifests(tmp_path / "trainer")
    assert [m["rank"] for m in manifests] == [0, 1]
    assert all(m["loader"]["created_by"] == "transformers" for m in manifests)
    thens = [_check_tuned(m) for m in manifests]
    assert thens[0] == thens[1] and thens[0]["num_workers"] == int(said.group(1)), thens
    assert [len(m["step_clock"]["phase"]) for m in manifests] == [300, 300]
    assert leftover_processes(str(script)) == []
