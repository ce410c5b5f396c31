"""``child_argv``: how ``dlprof record -- COMMAND`` becomes the recorder's command line."""
from __future__ import annotations

import sys

import pytest

from dlprof.capture.launcher import child_argv
from dlprof.errors import InputError, UsageError

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


@pytest.mark.parametrize(
    ("command", "error", "message"),
    [
        ((), UsageError, "no command after '--'"),
        (("python", "-c", "print(1)"), UsageError, "code strings are not supported"),
        (("ls", "-la"), UsageError, "can only run Python scripts"),
        (("bash", "train.py"), UsageError, "can only run Python scripts"),
        (("python", "missing.py"), InputError, "missing.py: no such script"),
        (("python", "-u"), UsageError, "no script given"),
        (("python", "-m"), UsageError, "no module given"),
        (("python3.0.99", "train.py"), InputError, "no such interpreter"),
    ],
    ids=["empty", "code-string", "not-python", "bash", "missing-script", "no-script", "no-module", "no-interpreter"],
)
def test_errors(in_tmp, command, error, message):
    with pytest.raises(error, match=message):
        child_argv(command)
