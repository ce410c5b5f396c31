"""Faults during ``dlprof record``: no recording is lost or mixed, every failure is one line, no process is left.

Each test runs a real ``dlprof record`` of tests/scripts/slow_dataset.py (copied under a unique name,
to find its processes) and breaks something on purpose: a second record into the same run, signals to
dlprof alone, the training process killed, Ctrl-C early, an odd script name, an unwritable --out, a
full disk.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import SCRIPTS_DIR, check_recorded_traces, leftover_processes, run_dlprof, trace_files

from dlprof.capture.spanfile import read_span_files
from dlprof.core import schema

pytestmark = pytest.mark.slow

#: A window that opens at once and stays open long enough to act inside it.
LONG_WINDOW = ("--wait", "1", "--warmup", "1", "--active", "100000")
SHORT = ("--wait", "1", "--warmup", "1", "--active", "4", "--reference-steps", "4")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / f"train_{os.getpid()}_{time.monotonic_ns()}.py"
    shutil.copy(SCRIPTS_DIR / "slow_dataset.py", path)
    return path


def _manifest(run_dir: Path) -> dict:
    (trace,) = trace_files(run_dir)
    return json.loads(gzip.decompress(trace.read_bytes()))[schema.MANIFEST_KEY]


def _start(out: Path, name: str | None, script: Path, *args: str, options=LONG_WINDOW) -> subprocess.Popen:
    named = ("--name", name) if name else ()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlprof",
            "record",
            "--out",
            str(out),
            *named,
            *options,
            "--",
            "python",
            str(script),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(condition, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _recording(run_dir: Path) -> bool:
    """The training process has started recording (its spans are being written)."""
    return any((run_dir / schema.SCRATCH_DIR / "spans").glob("*/*.spans"))


def _batches_taken(run_dir: Path) -> int:
    """Batches the training process has taken so far: the ``__next__`` records of the span files."""
    return sum(len(read_span_files(spans).next_calls) for spans in (run_dir / schema.SCRATCH_DIR / "spans").glob("*"))


def _exported(run_dir: Path) -> bool:
    return any((run_dir / schema.SCRATCH_DIR).glob("kineto-rank*.json"))


def _finish(process: subprocess.Popen) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    check_recorded_traces(Path(process.args[process.args.index("--out") + 1]))
    return process.returncode, stderr


def test_a_second_record_into_a_run_being_written_is_refused(tmp_path, script):
    first = _start(
        tmp_path,
        "same",
        script,
        "--steps",
        "100000",
        "--sleep-ms",
        "1",
        options=("--wait", "1", "--warmup", "1", "--active", "20"),
    )
    try:
        # Past its window: a Ctrl-C before the first recorded step would leave no run (another test's case).
        _wait_for(lambda: _exported(tmp_path / "same"))
        second = run_dlprof(
            "record", "--out", str(tmp_path), "--name", "same", *SHORT, "--", "python", str(script), "--steps", "40"
        )
        assert second.returncode == 2
        last = second.stderr.strip().splitlines()[-1]
        assert (
            last.startswith("dlprof: error: ")
            and "is being recorded by another dlprof record" in last
            and "--name" in last
        )
        analyzed = run_dlprof("analyze", str(tmp_path / "same"))  # not finished yet: says so
        assert (
            analyzed.returncode == 2
            and "is still being recorded (dlprof record, pid" in analyzed.stderr.strip().splitlines()[-1]
        )
    finally:
        first.send_signal(signal.SIGINT)
        code, stderr = _finish(first)
    assert code == 130, stderr
    manifest = _manifest(tmp_path / "same")
    assert manifest["script"][-4:] == ["--steps", "100000", "--sleep-ms", "1"]  # the first run's own trace, untouched
    assert leftover_processes(script.name) == []


def test_records_without_a_name_started_together_get_their_own_runs(tmp_path, script):
    runs = [_start(tmp_path, None, script, "--steps", "40", "--sleep-ms", "1", options=SHORT) for _ in range(2)]
    codes = [_finish(run) for run in runs]
    assert [code for code, _ in codes] == [0, 0], codes
    run_dirs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith("train_"))
    assert len(run_dirs) == 2 and all(len(trace_files(d)) == 1 for d in run_dirs)
    assert all(_manifest(d)["status"] == "complete" for d in run_dirs)
    assert len({trace_files(d)[0].name for d in run_dirs}) == 2  # two training processes, one each


@pytest.mark.parametrize(
    ("signum", "code", "error"),
    [(signal.SIGTERM, 143, "stopped by SIGTERM"), (signal.SIGINT, 130, "interrupted (KeyboardInterrupt)")],
    ids=["sigterm", "sigint"],
)
def test_a_signal_to_dlprof_alone_reaches_the_training(tmp_path, script, signum, code, error):
    """Schedulers and ``timeout`` signal dlprof record only: the training must still save its recording."""
    process = _start(tmp_path, "signalled", script, "--num-workers", "2", "--steps", "100000", "--sleep-ms", "1")
    # Steps inside the window (it opens after 2): a machine under load may take seconds to get there.
    _wait_for(lambda: _batches_taken(tmp_path / "signalled") >= 10)
    os.kill(process.pid, signum)  # to dlprof record alone, not its process group
    returncode, stderr = _finish(process)
    assert returncode == code, stderr
    manifest = _manifest(tmp_path / "signalled")
    assert manifest["status"] == "partial" and manifest["error"] == error
    assert manifest["steps"]["recorded"] > 0
    assert leftover_processes(script.name) == []


def test_the_exported_window_survives_the_training_being_killed(tmp_path, script):
    """The out-of-memory killer sends SIGKILL: the steps already exported are kept, and the cause is named."""
    process = _start(
        tmp_path,
        "killed",
        script,
        "--steps",
        "100000",
        "--sleep-ms",
        "1",
        options=("--wait", "1", "--warmup", "1", "--active", "5", "--run-to-end"),
    )
    run_dir = tmp_path / "killed"
    _wait_for(lambda: _exported(run_dir))
    _wait_for(lambda: any((run_dir / schema.SCRATCH_DIR).glob("result-rank*.json")))
    (trainer,) = [p for p in psutil.Process(process.pid).children() if any(script.name in part for part in p.cmdline())]
    trainer.kill()
    returncode, stderr = _finish(process)
    assert returncode == 137, stderr
    manifest = _manifest(run_dir)
    assert manifest["status"] == "partial"
    assert (
        manifest["error"]
        == "the training process was killed by SIGKILL (out of memory?) before dlprof finished its recording"
    )
    assert manifest["steps"]["recorded"] == 5
    assert leftover_processes(script.name) == []


def test_ctrl_c_before_the_first_recorded_step_exits_130(tmp_path, script):
    process = _start(
        tmp_path,
        "early",
        script,
        "--steps",
        "100000",
        "--sleep-ms",
        "1",
        options=("--wait", "100000", "--warmup", "1", "--active", "1"),
    )
    _wait_for(lambda: _recording(tmp_path / "early"))
    os.killpg(process.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    returncode, stderr = _finish(process)
    assert returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("dlprof: error: ")
    assert not (tmp_path / "early").exists()
    assert leftover_processes(script.name) == []


def test_any_script_name_gives_a_safe_run_name(tmp_path):
    odd = tmp_path / "my träin (v2).py"
    shutil.copy(SCRIPTS_DIR / "slow_dataset.py", odd)
    done = run_dlprof(
        "record", "--out", str(tmp_path / "out"), *SHORT, "--", "python", str(odd), "--steps", "40", "--sleep-ms", "1"
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    assert run_dir.name.startswith("my_tr_in_v2-") and len(trace_files(run_dir)) == 1


def test_an_unwritable_out_is_one_line(tmp_path, script):
    done = run_dlprof("record", "--out", "/proc/dlprof-traces", *SHORT, "--", "python", str(script), "--steps", "40")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("dlprof: error: /proc/dlprof-traces") and "writable --out" in lines[0]
    ), done.stderr
    assert leftover_processes(script.name) == []


def test_a_full_disk_never_stops_the_training(tmp_path, script):
    """No space for the trace (here: a file-size limit, as a full disk refuses writes): training runs to its end, dlprof
    says why it has no trace."""
    limited = [
        sys.executable,
        "-c",
        (
            "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
            " resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024)); os.execv(sys.executable,"
            " [sys.executable] + sys.argv[1:])"
        ),
        "-m",
        "dlprof",
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "full",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "30",
        "--run-to-end",
        "--",
        "python",
        str(script),
        "--steps",
        "60",
        "--sleep-ms",
        "0",
    ]
    done = subprocess.run(limited, capture_output=True, text=True, timeout=180)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dlprof: error: ") and "could not save the recorded steps" in last, done.stderr
    assert (
        "no space left on the device, or a file-size limit" in last
        and "free disk space or choose another --out" in last
    )
    assert "trained 60 steps" in done.stdout  # the training itself finished
    assert not (tmp_path / "full").exists()
    assert leftover_processes(script.name) == []
