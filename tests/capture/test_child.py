"""``child_argv``: how ``dlprof record -- COMMAND`` becomes the command line that runs under the recorder; ``run_child``
ends what the command leaves behind, and only that."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from dlprof.capture.child import child_argv, run_child
from dlprof.core.errors import InputError, UsageError

INJECT = ["-m", "dlprof.capture.inject"]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("pass\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_script_with_arguments(in_tmp):
    assert child_argv(("python", "train.py", "--lr", "1")) == ["python", *INJECT, "train.py", "--lr", "1"]


def test_absolute_script_path(in_tmp):
    script = str(in_tmp / "train.py")
    assert child_argv(("python3", script)) == ["python3", *INJECT, script]


def test_interpreter_options_stay_before_inject(in_tmp):
    command = ("python", "-u", "-W", "ignore", "-X", "importtime", "train.py", "-W", "x")
    assert child_argv(command) == ["python", "-u", "-W", "ignore", "-X", "importtime", *INJECT, "train.py", "-W", "x"]


def test_module(in_tmp):
    assert child_argv(("python", "-m", "pkg.mod", "a", "b")) == ["python", *INJECT, "-m", "pkg.mod", "a", "b"]


def test_bare_script_gets_this_interpreter(in_tmp):
    assert child_argv(("train.py", "--x")) == [sys.executable, *INJECT, "train.py", "--x"]


def test_interpreter_by_path(in_tmp):
    assert child_argv((sys.executable, "train.py"))[:3] == [sys.executable, *INJECT]


def test_any_other_command_runs_as_it_is(in_tmp):
    # Launchers and shell scripts are followed by the bootstrap sitecustomize, not wrapped.
    assert child_argv(("torchrun", "--nproc-per-node", "2", "train.py")) == [
        "torchrun",
        "--nproc-per-node",
        "2",
        "train.py",
    ]
    assert child_argv(("bash", "run.sh", "--x")) == ["bash", "run.sh", "--x"]
    assert child_argv(("python", "-c", "print(1)")) == ["python", "-c", "print(1)"]


def test_an_executable_script_by_path_runs_as_it_is(in_tmp):
    launcher = in_tmp / "launch.sh"
    launcher.write_text("#!/bin/sh\nexec python train.py\n")
    launcher.chmod(0o755)
    assert child_argv((str(launcher), "a")) == [str(launcher), "a"]


@pytest.mark.parametrize(
    ("command", "error", "message"),
    [
        ((), UsageError, "no command after '--'"),
        (("no-such-launcher-xyz", "train.py"), InputError, "no-such-launcher-xyz: no such command"),
        (("train.sh",), InputError, "train.sh: not executable; run it as 'bash train.sh'"),
        (("python", "missing.py"), InputError, "missing.py: no such script"),
        (("python", "-u"), UsageError, "no script given"),
        (("python", "-m"), UsageError, "no module given"),
        (("python3.0.99", "train.py"), InputError, "python3.0.99: no such command"),
    ],
    ids=["empty", "unknown-command", "not-executable", "missing-script", "no-script", "no-module", "no-interpreter"],
)
def test_errors(in_tmp, command, error, message):
    (in_tmp / "train.sh").write_text("python train.py\n")
    with pytest.raises(error, match=message):
        child_argv(command)


def test_the_processes_the_command_leaves_are_ended_and_no_others(tmp_path):
    """``dlprof record`` in a process that has children of its own (a notebook; the fork server that ``dlprof analyze
    --processes`` starts, in the tests): the command's leftovers are ended, the caller's own processes are not."""
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    left = tmp_path / "left.pid"
    command = (
        f"import subprocess, sys; p = subprocess.Popen(['sleep', '60']); open({str(left)!r}, 'w').write(str(p.pid))"
    )
    try:
        exit_code, _, stopped_by = run_child([sys.executable, "-c", command], dict(os.environ), 1000, tmp_path)
        assert (exit_code, stopped_by) == (0, None)
        assert not psutil.pid_exists(int(left.read_text()))  # orphaned by the command, ended (and reaped) by us
        assert mine.poll() is None  # still running
    finally:
        mine.kill()
        mine.wait()
