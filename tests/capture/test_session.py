"""The session's signal handling, in process: a SIGTERM whose SystemExit was swallowed still ends training."""

from __future__ import annotations

import signal

import pytest

from dlprof.capture.session import Session


@pytest.fixture
def session(tmp_path):
    previous = signal.getsignal(signal.SIGTERM)
    yield Session(tmp_path, {"schedule": {"wait": 1, "warmup": 1, "active": 1}})
    signal.signal(signal.SIGTERM, previous)


def test_a_swallowed_sigterm_is_raised_again_at_the_next_step(session):
    # The handler ran inside code that swallows exceptions (a __del__, a C++ callback): training went on.
    with pytest.raises(SystemExit):
        session._terminated(signal.SIGTERM, None)
    assert session.status == "partial" and session.error == "stopped by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # a second SIGTERM would not come
    with pytest.raises(SystemExit) as stopped:
        session._optimizer_stepped(object(), (), {})
    assert stopped.value.code == 128 + signal.SIGTERM
    with pytest.raises(SystemExit):
        session._loader_event("batch", 0)


def test_nothing_is_raised_without_a_signal_or_once_finished(session):
    session.helper = True  # records nothing: the hooks only dispatch
    session._optimizer_stepped(object(), (), {})
    session._loader_event("batch", 0)
    with pytest.raises(SystemExit):
        session._terminated(signal.SIGTERM, None)
    session.finished = True  # exiting: the recording is being finished, nothing may interrupt it
    session._optimizer_stepped(object(), (), {})
    session._loader_event("batch", 0)
