"""The fork probe's fork: a Ctrl-C that arrives while it forks reaches the training after the fork, not inside the
at-fork callbacks where a KeyboardInterrupt is printed and dropped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dlprof.capture import step_clock
from dlprof.capture.step_clock import ForkProbe


class _Loader:
    config = {"num_workers": 0}


@pytest.fixture
def sleeper():
    """A real process to stand for the forked child (the probe kills and reaps it)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def _gone(pid: int) -> bool:
    """Killed and reaped by the probe: no such process is left."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _probe(monkeypatch, fork) -> ForkProbe:
    monkeypatch.setattr(step_clock.os, "fork", fork)
    monkeypatch.setattr(step_clock.multiprocessing, "get_start_method", lambda allow_none=False: None)
    monkeypatch.setattr(step_clock.multiprocessing, "get_all_start_methods", lambda: ["fork", "spawn"])
    return ForkProbe()


def test_a_ctrl_c_during_the_fork_is_raised_after_it(monkeypatch, sleeper):
    seen: list[str] = []

    def fork():
        # The user's Ctrl-C lands while the fork runs its callbacks: the handler in force then must not raise.
        signal.raise_signal(signal.SIGINT)
        seen.append("forked")
        return sleeper.pid

    probe = _probe(monkeypatch, fork)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        probe.maybe_fork(step_clock.FORK_PROBE_AFTER_STEP, _Loader)
    assert seen == ["forked"] and probe.pid == sleeper.pid  # the fork completed, then the interrupt came
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the training's handler is back
    probe.reap()
    assert probe.pid is None and _gone(sleeper.pid)


def test_a_quiet_fork_raises_nothing(monkeypatch, sleeper):
    probe = _probe(monkeypatch, lambda: sleeper.pid)
    assert probe.maybe_fork(step_clock.FORK_PROBE_AFTER_STEP - 1, _Loader) is False  # not its step
    assert probe.maybe_fork(step_clock.FORK_PROBE_AFTER_STEP, _Loader) is True
    assert probe.pid == sleeper.pid and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert probe.maybe_fork(step_clock.FORK_PROBE_AFTER_STEP, _Loader) is False  # once only
    probe.reap()
    assert probe.pid is None and _gone(sleeper.pid)
