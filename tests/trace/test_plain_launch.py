"""The plain launch's steps beside a trace: read and checked once, a one-line error that names the file otherwise."""

from __future__ import annotations

import json
import math

import pytest

from dlprof.core import schema
from dlprof.core.errors import InputError
from dlprof.trace.discover import find_traces
from dlprof.trace.plain_launch import read_plain_launch

TRACE = "host_12.345.pt.trace.json.gz"


def _write(tmp_path, **fields):
    document = {"schema": schema.PLAIN_LAUNCH_SCHEMA, "trace": TRACE, "step_ms": [10.0, 11.5], "stop_step": 2}
    document.update({"exit_code": 0, **fields})
    path = tmp_path / "plain-launch" / "host_12.345.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(document))
    return tmp_path / TRACE


def test_the_file_beside_a_trace_is_named_after_it(tmp_path):
    for name in (TRACE, "host_12.345.pt.trace.json", "trace.json.gz", "trace.json"):
        stem = name.split(".pt.trace")[0] if ".pt.trace" in name else name.split(".json")[0]
        assert schema.plain_launch_path(tmp_path / name) == tmp_path / "plain-launch" / f"{stem}.json"


def test_a_plain_launch_is_read(tmp_path):
    launch = read_plain_launch(_write(tmp_path))
    assert (launch.trace, launch.step_ms, launch.stop_step, launch.exit_code) == (TRACE, (10.0, 11.5), 2, 0)
    assert read_plain_launch(tmp_path / "other.pt.trace.json.gz") is None  # none beside it


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"schema": "dlprof.report/1"}, "not a plain launch's steps (dlprof.plain_launch/1)"),
        ({"trace": "other.pt.trace.json.gz"}, "it holds the steps of another trace"),
        ({"step_ms": []}, "its step_ms is no list of step times"),
        ({"step_ms": [1.0, -2.0]}, "an entry that is no time in ms"),
        ({"step_ms": [1.0, "2"]}, "an entry that is no time in ms"),
        ({"step_ms": [1.0, True]}, "an entry that is no time in ms"),
        ({"stop_step": 0}, "its stop_step or exit_code is no whole number"),
        ({"stop_step": True}, "its stop_step or exit_code is no whole number"),
        ({"exit_code": 1.5}, "its stop_step or exit_code is no whole number"),
    ],
)
def test_a_file_that_cannot_be_used_is_one_line_naming_it(tmp_path, fields, problem):
    trace = _write(tmp_path, **fields)
    with pytest.raises(InputError) as raised:
        read_plain_launch(trace)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "plain-launch" / "host_12.345.json") + ": ")
    assert problem in message and message.endswith("or record again with --plain-launch")


def test_json_that_is_not_json_or_not_finite(tmp_path):
    trace = _write(tmp_path)
    schema.plain_launch_path(trace).write_text("{not json")
    with pytest.raises(InputError, match="cannot be read \\(not JSON\\)"):
        read_plain_launch(trace)
    schema.plain_launch_path(trace).write_text(
        json.dumps({"schema": schema.PLAIN_LAUNCH_SCHEMA, "trace": TRACE, "step_ms": [math.nan], "stop_step": 1})
    )
    with pytest.raises(InputError, match="no time in ms"):
        read_plain_launch(trace)


def test_the_file_is_no_trace_of_its_run_nor_a_run_of_its_own(tmp_path):
    run = tmp_path / "traces" / "r"
    run.mkdir(parents=True)
    trace = _write(run)
    trace.write_bytes(b"")  # the trace's name is what counts here
    assert find_traces(run) == [[trace]]
    assert find_traces(tmp_path / "traces") == [[trace]]  # a directory of runs: the runs' own folders not looked into
