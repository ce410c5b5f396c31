"""The job a record belongs to (capture/job.py), and the run directory the records of a job's nodes share
(capture/run_dir.py): who joins, who is refused, and that a node removes only its own files."""

from __future__ import annotations

import json
import os
import socket

import pytest

from dlprof.capture.job import Job, find_job
from dlprof.capture.record import record
from dlprof.capture.run_dir import prepare_run_dir, remove_unrecorded, scratch_dir
from dlprof.core import schema
from dlprof.core.errors import UsageError
from dlprof.results.record import RecordRequest

TORCHRUN = ("torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d")


def _torchrun(*options: str) -> tuple[str, ...]:
    return (*TORCHRUN, *options, "train.py", "--lr", "1")


@pytest.mark.parametrize(
    ("command", "environ", "key", "source"),
    [
        (
            _torchrun("--rdzv-id", "job1", "--rdzv-endpoint", "h:1"),
            {"TORCHELASTIC_RUN_ID": "x"},
            "rdzv-id=job1",
            "--rdzv-id",
        ),
        (_torchrun("--rdzv_id=job1"), {}, "rdzv-id=job1", "--rdzv-id"),
        # torchrun's default id is no id: the environment's run id, then the endpoint, come next.
        (_torchrun("--rdzv-id", "none", "--rdzv-endpoint", "h:1"), {"TORCHELASTIC_RUN_ID": "r7"}, "run-id=r7", None),
        (_torchrun("--rdzv-id", "none", "--rdzv-endpoint", "h:1"), {}, "endpoint=h:1", "--rdzv-endpoint"),
        (_torchrun("--rdzv_endpoint=h:1"), {"MASTER_ADDR": "m", "MASTER_PORT": "2"}, "endpoint=h:1", None),
        (_torchrun("--master-addr", "m", "--master_port", "29500"), {}, "endpoint=m:29500", None),
        (_torchrun(), {"MASTER_ADDR": "m", "MASTER_PORT": "2"}, "endpoint=m:2", "MASTER_ADDR/MASTER_PORT"),
        (
            ("accelerate", "launch", "--main_process_ip", "m", "--main_process_port", "3", "t.py"),
            {},
            "endpoint=m:3",
            None,
        ),
    ],
)
def test_the_job_key_by_precedence(command, environ, key, source):
    job = find_job(command, environ)
    assert job is not None and job.key == key
    if source is not None:
        assert job.source == source


def test_no_key_no_job_and_the_scripts_own_options_are_not_the_launchers():
    assert find_job(("torchrun", "--nproc-per-node", "2", "--master-port", "29500", "train.py"), {}) is None
    assert find_job(("python", "train.py", "--rdzv-id", "mine", "--master-addr", "a"), {}) is None
    assert find_job(("torchrun", "--standalone", "train.py"), {"TORCHELASTIC_RUN_ID": "none"}) is None


def test_nodes_and_node_rank():
    job = find_job(_torchrun("--rdzv-id", "j", "--node-rank", "1"), {})
    assert (job.nodes, job.node_rank, job.multi_node) == (2, 1, True)
    elastic = find_job(("torchrun", "--nnodes=1:4", "--rdzv-id", "j", "t.py"), {})
    assert (elastic.nodes, elastic.node_rank, elastic.multi_node) == (4, None, True)
    single = find_job(("torchrun", "--nnodes", "1", "t.py"), {"MASTER_ADDR": "a", "MASTER_PORT": "1"})
    assert single.multi_node is False
    assert Job("rdzv-id=j", "x").digest == Job("rdzv-id=j", "y", 2, 1).digest != Job("rdzv-id=k", "x").digest
    assert Job("endpoint=node0.cluster:29500", "x").digest.startswith("sha256:")  # no host name in a redacted trace


def _owner(scratch) -> dict:
    return json.loads((scratch / schema.SCRATCH_OWNER_FILE).read_text())


def test_the_nodes_of_one_job_share_the_run_directory(tmp_path):
    node0, node1 = Job("rdzv-id=j", "--rdzv-id", 2, 0), Job("rdzv-id=j", "--rdzv-id", 2, 1)
    run = prepare_run_dir(tmp_path, "job", job=node0)
    assert prepare_run_dir(tmp_path, "job", job=node1) == run
    host = socket.gethostname()
    assert sorted(p.name for p in run.iterdir()) == [f".dlprof-scratch-node0-{host}", f".dlprof-scratch-node1-{host}"]
    assert _owner(scratch_dir(run, node1)) == {"pid": os.getpid(), "host": socket.gethostname(), "job": "rdzv-id=j"}
    # A node that fails removes its own scratch folder, never another node's, nor the run directory they share.
    remove_unrecorded(run, scratch_dir(run, node1))
    assert [p.name for p in run.iterdir()] == [f".dlprof-scratch-node0-{host}"]
    remove_unrecorded(run, scratch_dir(run, node0))
    assert not run.exists()


def _foreign(run_dir, name: str, job: str | None, pid: int | None = None, host: str | None = None):
    """A scratch folder of another record: a live process (this test's parent) unless ``pid`` says otherwise."""
    scratch = run_dir / name
    scratch.mkdir(parents=True)
    owner = {"pid": pid or os.getppid(), "host": host or socket.gethostname(), "job": job}
    (scratch / schema.SCRATCH_OWNER_FILE).write_text(json.dumps(owner))
    return scratch


def test_another_job_with_the_same_name_is_refused_as_before(tmp_path):
    _foreign(tmp_path / "job", ".dlprof-scratch-node0", "rdzv-id=other")
    with pytest.raises(UsageError, match=rf"job: is being recorded by another dlprof record \(pid {os.getppid()}\); "):
        prepare_run_dir(tmp_path, "job", job=Job("rdzv-id=j", "--rdzv-id", 2, 1))
    # A record of no job is refused by a job's node, and keeps a job's nodes out.
    with pytest.raises(UsageError, match="is being recorded by another dlprof record"):
        prepare_run_dir(tmp_path, "job")
    _foreign(tmp_path / "solo", schema.SCRATCH_DIR, None)
    with pytest.raises(UsageError, match="is being recorded by another dlprof record"):
        prepare_run_dir(tmp_path, "solo", job=Job("rdzv-id=j", "--rdzv-id", 2, 0))
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == [".dlprof-scratch-node0"]


def test_a_node_recorded_twice_and_a_finished_run_are_refused(tmp_path):
    node1 = Job("rdzv-id=j", "--rdzv-id", 2, 1)
    _foreign(tmp_path / "job", scratch_dir(tmp_path / "job", node1).name, "rdzv-id=j")
    node = f"node1-{socket.gethostname()}"
    with pytest.raises(UsageError, match=rf"another dlprof record \(pid \d+, as {node} of this job\)"):
        prepare_run_dir(tmp_path, "job", job=node1)
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / f"h_1.1{schema.TRACE_SUFFIX}").write_bytes(b"")
    with pytest.raises(UsageError, match="already holds a recorded run"):
        prepare_run_dir(tmp_path, "done", job=Job("rdzv-id=j", "--rdzv-id", 2, 1))


def test_a_dead_record_and_a_node_on_another_machine(tmp_path):
    dead = 2**22 + 12345  # above Linux's largest pid: no such process
    _foreign(tmp_path / "job", ".dlprof-scratch-node0", "rdzv-id=other", pid=dead)
    with pytest.raises(UsageError, match="did not finish .*; delete that folder"):
        prepare_run_dir(tmp_path, "job", job=Job("rdzv-id=j", "--rdzv-id", 2, 1))
    # Another machine's process cannot be asked: it is taken for alive, and named with its host.
    _foreign(tmp_path / "far", ".dlprof-scratch-node0", "rdzv-id=other", pid=dead, host="elsewhere")
    with pytest.raises(UsageError, match=rf"another dlprof record \(pid {dead} on elsewhere\)"):
        prepare_run_dir(tmp_path, "far", job=Job("rdzv-id=j", "--rdzv-id", 2, 1))
    _foreign(tmp_path / "near", ".dlprof-scratch-node0", "rdzv-id=j", pid=dead, host="elsewhere")
    assert prepare_run_dir(tmp_path, "near", job=Job("rdzv-id=j", "--rdzv-id", 2, 1)).is_dir()


def test_several_nodes_need_a_name(tmp_path):
    command = _torchrun("--rdzv-id", "j", "--node-rank", "1")
    request = RecordRequest(
        command=command,
        out_dir=tmp_path,
        name="train-20260101-000000",
        wait=1,
        warmup=1,
        active=2,
        fresh_name_if_taken=True,
    )
    with pytest.raises(UsageError, match="torchrun runs on 2 machines: give --name, the same on every node"):
        record(request)
    assert list(tmp_path.iterdir()) == []


def test_a_node_that_fails_leaves_the_other_nodes_files(tmp_path):
    from dlprof.capture.finalize import Wording, write_traces
    from dlprof.capture.merge import MergeInputs
    from dlprof.capture.session import ERROR_FILE
    from dlprof.core.errors import RecordError

    node0, node1 = Job("rdzv-id=j", "--rdzv-id", 2, 0), Job("rdzv-id=j", "--rdzv-id", 2, 1)
    run = prepare_run_dir(tmp_path, "job", job=node0)
    prepare_run_dir(tmp_path, "job", job=node1)
    (scratch_dir(run, node1) / ERROR_FILE).write_text("train.py: boom")
    inputs = MergeInputs(
        session_dir=scratch_dir(run, node1),
        command=("dlprof",),
        script=("torchrun",),
        exit_code=1,
        memory_samples=[],
        memory_interval_ms=100,
        job="rdzv-id=j",
    )
    with pytest.raises(RecordError, match="boom"):
        write_traces(run, inputs, Wording("torchrun train.py", 3, "--wait 1 --warmup 1", "--wait/--warmup"))
    assert [p.name for p in run.iterdir()] == [scratch_dir(run, node0).name]


def test_the_refusal_is_one_line_from_the_command_line(tmp_path):
    from conftest import assert_one_line_error, invoke

    _foreign(tmp_path / "job", ".dlprof-scratch-node0", "rdzv-id=other")
    command = _torchrun("--rdzv-id", "mine", "--node-rank", "1")
    done = invoke("record", "--out", tmp_path, "--name", "job", "--", *command)
    assert_one_line_error(done, f"job: is being recorded by another dlprof record (pid {os.getppid()}); choose another")
    done = invoke("record", "--out", tmp_path / "fresh", "--", *command)
    assert_one_line_error(done, "torchrun runs on 2 machines: give --name, the same on every node")
    assert not (tmp_path / "fresh").exists()


def test_analyze_says_a_job_is_still_being_recorded(tmp_path):
    from conftest import assert_one_line_error, invoke

    _foreign(tmp_path / "job", ".dlprof-scratch-node1", "rdzv-id=j")
    assert_one_line_error(
        invoke("analyze", tmp_path / "job"), f"is still being recorded (dlprof record, pid {os.getppid()})"
    )


def test_two_nodes_never_write_one_trace_name(tmp_path, monkeypatch):
    """Nodes share host labels with --redact, and pids in containers: a name taken moves on by a millisecond."""
    from dlprof.capture import finalize
    from dlprof.capture.finalize import _free_trace_path

    monkeypatch.setattr(finalize.time, "time_ns", lambda: 1_700_000_000_000_000_000)  # both in the same millisecond
    first = _free_trace_path(tmp_path, "host-1", 42)
    first.write_bytes(b"")
    second = _free_trace_path(tmp_path, "host-1", 42)
    assert (first.name, second.name) == (
        f"host-1_42.1700000000000{schema.TRACE_SUFFIX}",
        f"host-1_42.1700000000001{schema.TRACE_SUFFIX}",
    )
