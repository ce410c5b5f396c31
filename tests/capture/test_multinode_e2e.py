"""A job over two machines, simulated on this one: two ``dlprof record -- torchrun --nnodes 2 --node-rank R ...``
started together (c10d rendezvous on localhost), one per node, as on a cluster.

Each test runs one short job of two CPU ranks (gloo): about 30-60 s on 2 shared cores.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import free_port, leftover_processes, run_dlprof, trace_files
from trace_checks import trace_problems

from dlprof.core import schema

pytestmark = pytest.mark.slow

DDP = Path(__file__).resolve().parents[1] / "data" / "launch" / "train_ddp.py"
#: A short window: these tests check what is recorded and where, not how fast training is.
SHORT = ("--wait", "1", "--warmup", "1", "--active", "3", "--reference-steps", "3")
#: Seconds a node's record may take: two torch start-ups and a rendezvous on 2 shared cores, then a few steps.
NODE_TIMEOUT_S = 240


def _node(out: Path, node_rank: int, port: int, job_id: str, name: str = "job") -> subprocess.Popen:
    """``dlprof record`` of one node of a two-node torchrun job (in a session of its own; its output in files in
    ``out``, beside the run directory, so that neither node ever blocks on a full pipe)."""
    command = [
        sys.executable,
        "-m",
        "dlprof",
        "record",
        "--out",
        str(out),
        "--name",
        name,
        *SHORT,
        "--",
        "torchrun",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--node-rank",
        str(node_rank),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"localhost:{port}",
        "--rdzv-id",
        job_id,
        str(DDP),
        "--steps",
        "100000",
        "--slow-rank-ms",
        "1",
    ]
    out.mkdir(parents=True, exist_ok=True)
    logs = out / f"node{node_rank}"
    with open(f"{logs}.out", "w") as stdout, open(f"{logs}.err", "w") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, start_new_session=True)
    process.logs = logs  # type: ignore[attr-defined]
    return process


def _finish(nodes: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    """Each node's exit code, stdout and stderr; a node that hangs is killed with everything it started."""
    try:
        deadline = time.monotonic() + NODE_TIMEOUT_S
        for node in nodes:
            node.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for node in nodes:
            if node.poll() is None:  # a failed test must not leave ranks behind
                for leftover in psutil.Process(node.pid).children(recursive=True):
                    leftover.kill()
                node.kill()
                node.wait()
    return [
        (node.returncode, Path(f"{node.logs}.out").read_text(), Path(f"{node.logs}.err").read_text()) for node in nodes
    ]


def _manifests(traces: list[Path]) -> list[dict]:
    documents = [json.loads(gzip.decompress(p.read_bytes())) for p in traces]
    assert not any(trace_problems(d) for d in documents), [trace_problems(d).lines() for d in documents]
    return sorted((d[schema.MANIFEST_KEY] for d in documents), key=lambda m: m["rank"])


def _check_job(manifests: list[dict], job_id: str) -> None:
    assert [m["rank"] for m in manifests] == [0, 1]
    assert all(m["world_size"] == 2 and m["local_world_size"] == 1 for m in manifests)
    assert all(m["job"] == f"rdzv-id={job_id}" and m["status"] == "complete" for m in manifests)


def test_two_nodes_record_one_run_directory(tmp_path):
    """Both nodes exit 0 with their rank's trace in the one shared run directory, which HTA and dlprof read as one
    job of two ranks; a record of another job under the same name is refused while they run."""
    port, job_id = free_port(), f"job{free_port()}"
    nodes = [_node(tmp_path, 0, port, job_id)]
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "job").glob(".dlprof-scratch-node0-*")):
            assert time.monotonic() < deadline and nodes[0].poll() is None, "node 0 did not claim the run directory"
            time.sleep(0.2)
        other = run_dlprof(
            "record",
            "--out",
            str(tmp_path),
            "--name",
            "job",
            "--",
            "torchrun",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"localhost:{free_port()}",
            "--rdzv-id",
            "another",
            str(DDP),
            timeout=60,
        )
        assert other.returncode == 2, other.stderr
        assert other.stderr.strip().splitlines() == [
            f"dlprof: error: {tmp_path / 'job'}: is being recorded by another dlprof record (pid {nodes[0].pid});"
            " choose another --name"
        ]
        nodes.append(_node(tmp_path, 1, port, job_id))
    finally:
        done = _finish(nodes)
    assert [code for code, _, _ in done] == [0, 0], [stderr[-2000:] for _, _, stderr in done]
    run = tmp_path / "job"
    traces = trace_files(run)
    assert len(traces) == 2
    _check_job(_manifests(traces), job_id)
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in traces)  # no node's scratch left
    # Each node names the trace it wrote.
    assert sorted(line.split("trace: ")[1] for _, out, _ in done for line in out.splitlines() if "trace: " in line) == [
        str(p) for p in traces
    ]

    import dlprof

    (report,) = dlprof.analyze(run).runs
    assert [r.rank for r in report.ranks.ranks] == [0, 1] and report.missing_ranks == ()
    assert leftover_processes(str(DDP)) == []
    # HTA loads the job's traces as they are (the compatibility check; HTA comes with the hta extra).
    hta = pytest.importorskip("hta.trace_analysis")
    assert sorted(hta.TraceAnalysis(trace_dir=str(run)).t.traces.keys()) == [0, 1]


def test_node_local_directories_are_analysed_as_one_run(tmp_path):
    """Each node writes to its own disk; ``dlprof analyze node0/job node1/job`` puts the job back together, and one
    node's directory alone names the rank it lacks."""
    port, job_id = free_port(), f"job{free_port()}"
    done = _finish([_node(tmp_path / "node0", 0, port, job_id), _node(tmp_path / "node1", 1, port, job_id)])
    assert [code for code, _, _ in done] == [0, 0], [stderr[-2000:] for _, _, stderr in done]
    runs = [tmp_path / "node0" / "job", tmp_path / "node1" / "job"]
    assert [len(trace_files(run)) for run in runs] == [1, 1]
    _check_job(_manifests([t for run in runs for t in trace_files(run)]), job_id)

    analyzed = run_dlprof("analyze", *map(str, runs), "--format", "json", timeout=120)
    assert analyzed.returncode == 0, analyzed.stderr
    document = json.loads(analyzed.stdout)
    assert [r["rank"] for r in document["ranks"]["ranks"]] == [0, 1] and document["missing_ranks"] == []
    alone = run_dlprof("analyze", str(runs[0]), timeout=120)
    assert alone.returncode == 0, alone.stderr
    assert "note: missing rank " in alone.stdout
    assert leftover_processes(str(DDP)) == []
