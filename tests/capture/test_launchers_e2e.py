"""``dlprof record -- LAUNCHER ...`` with the real launchers, on CPU: every rank that trains, and only those, is
recorded."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from conftest import check_recorded_traces, free_port, leftover_processes, run_dlprof, trace_files

pytestmark = pytest.mark.slow

LAUNCH = Path(__file__).resolve().parents[1] / "data" / "launch"
DDP = LAUNCH / "train_ddp.py"
SIMPLE = LAUNCH / "train_simple.py"
TRAINER = LAUNCH / "train_trainer.py"
#: A short window: these tests check what is recorded, not how fast training is.
SHORT = ("--wait", "1", "--warmup", "1", "--active", "4", "--reference-steps", "4")


def _first_line(trace: Path) -> str:
    with gzip.open(trace, "rt") as f:
        return f.readline()


def _manifests(run_dir: Path) -> list[dict]:
    return sorted(
        (json.loads(gzip.decompress(p.read_bytes()))["dlprof"] for p in trace_files(run_dir)), key=lambda m: m["rank"]
    )


def _no_process_left(marker: str) -> None:
    """No process of the run (ranks, DataLoader workers, launchers) outlived ``dlprof record``."""
    assert leftover_processes(marker) == []


def _executable(path: Path, body: str) -> Path:
    """A console script, as pip installs one: a Python file with a shebang line, on PATH."""
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("torchrun")
    done = run_dlprof(
        "record",
        "--out",
        str(out),
        "--name",
        "ddp",
        *SHORT,
        "--",
        "torchrun",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(DDP),
        "--steps",
        "100000",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return out / "ddp"


def test_torchrun_gives_one_trace_per_rank_with_rank_and_world_size(torchrun_run):
    traces = trace_files(torchrun_run)
    assert len(traces) == 2
    manifests = _manifests(torchrun_run)
    assert [m["rank"] for m in manifests] == [0, 1]
    assert {m["world_size"] for m in manifests} == {2}
    assert {m["local_world_size"] for m in manifests} == {2}
    assert all(m["status"] == "complete" and m["stopped_early"] for m in manifests)
    # The launcher command, and what each rank's own process ran.
    assert all(m["script"][0] == "torchrun" for m in manifests)
    assert all(any(part.endswith("train_ddp.py") for part in m["process_argv"]) for m in manifests)
    # HTA's regex needs "rank": N with a space, on the first line.
    for trace in traces:
        first = _first_line(trace)
        assert first.startswith('{"distributedInfo": {') and '"world_size": 2' in first
    assert sorted(int(_first_line(t).split('"rank": ')[1].split(",")[0].rstrip("}")) for t in traces) == [0, 1]
    _no_process_left(str(DDP))


def test_analyze_names_the_data_starved_rank_and_the_wait_in_all_reduce(torchrun_run):
    """Rank 1's Dataset is slower: rank 1 waits for data, rank 0 waits for rank 1 in DDP's all-reduce."""
    from dlprof import analyze

    (job,) = analyze(torchrun_run).runs
    ranks = job.ranks
    assert ranks.slowest_rank == 1 and ranks.slowest_reason == "data"
    assert "all_reduce" in ranks.collectives
    rows = {r.rank: r for r in ranks.ranks}
    # Rank 1's wait for data shows up in rank 0 as time in the collective.
    assert rows[1].data_wait_ms > 2 * rows[0].data_wait_ms
    assert ranks.waited_ms[0] > 0.5 * ranks.extra_data_wait_ms
    assert job.info.trace_file.endswith(rows[1].trace_file)  # the report is the slowest rank's
    # Two ranks share this machine's cores: the model gives each its share.
    assert any("2 ranks share this machine" in line for line in job.advice.basis)


def test_hta_reads_every_rank(torchrun_run):
    hta = pytest.importorskip("hta.trace_analysis")  # HTA comes with the hta extra

    analysis = hta.TraceAnalysis(trace_dir=str(torchrun_run))
    assert sorted(analysis.t.traces.keys()) == [0, 1]


def test_python_m_torch_distributed_run(tmp_path):
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "ddp",
        *SHORT,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(DDP),
        "--steps",
        "100000",
        "--num-workers",
        "1",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    manifests = _manifests(tmp_path / "ddp")
    assert [m["rank"] for m in manifests] == [0, 1]
    # Each rank's DataLoader worker is in that rank's trace, and only there.
    worker_pids = [{w["pid"] for w in m["workers"]} for m in manifests]
    assert all(worker_pids) and not (worker_pids[0] & worker_pids[1])
    _no_process_left(str(DDP))


def test_torchrun_sigterm_leaves_partial_traces(tmp_path):
    """torchrun stops its workers with SIGTERM: each rank still leaves its trace, marked partial."""
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "dlprof",
        "record",
        "--out",
        str(out),
        "--name",
        "stopped",
        *SHORT,
        "--run-to-end",
        "--",
        "torchrun",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(DDP),
        "--steps",
        "100000",
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        ranks = _wait_for_ranks(process, 2, timeout_s=120)
        # ... past the window: both ranks have exported their traces.
        _wait_for(lambda: len(list((out / "stopped" / ".dlprof-scratch").glob("kineto-rank*.json"))) == 2, 120)
        for rank in ranks:
            rank.terminate()  # as torchrun's agent does to its workers
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # a failed test must not leave ranks behind (they run in sessions of their own)
            for leftover in psutil.Process(process.pid).children(recursive=True):
                leftover.kill()
            process.kill()
    manifests = _manifests(out / "stopped")
    assert [m["rank"] for m in manifests] == [0, 1]
    assert all(m["status"] == "partial" and m["error"] == "stopped by SIGTERM" for m in manifests), stderr
    _no_process_left(str(DDP))
    check_recorded_traces(out)


def _wait_for(condition, timeout_s: float) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _wait_for_ranks(process: subprocess.Popen, count: int, timeout_s: float) -> list[psutil.Process]:
    found: list[psutil.Process] = []

    def ranks_running() -> bool:
        nonlocal found
        found = [
            p
            for p in psutil.Process(process.pid).children(recursive=True)
            if any(part.endswith("train_ddp.py") for part in p.cmdline()) and "RANK" in p.environ()
        ]
        return len(found) == count

    _wait_for(ranks_running, timeout_s)
    return found


def test_accelerate_launch_of_a_trainer_script(tmp_path):
    """``accelerate launch`` starts the Trainer script in a subprocess; accelerate re-creates its DataLoader with a
    batch_sampler."""
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "acc",
        *SHORT,
        "--",
        "accelerate",
        "launch",
        "--num_processes",
        "1",
        "--cpu",
        str(TRAINER),
        "--output-dir",
        str(tmp_path / "hf"),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    (manifest,) = _manifests(tmp_path / "acc")
    assert manifest["status"] == "complete" and manifest["steps"]["recorded"] == 4
    assert manifest["script"][:2] == ["accelerate", "launch"]
    assert any(part.endswith("train_trainer.py") for part in manifest["process_argv"])
    loader = manifest["loader"]
    assert loader["batch_size"] == 4 and loader["created_by"] == "transformers" and loader["num_workers"] == 1
    assert manifest["workers"]  # the Trainer's DataLoader worker, recorded inside it
    from dlprof import analyze

    advice = analyze(tmp_path / "acc").runs[0].advice
    assert advice.trainer_arguments.startswith("--dataloader_num_workers ")
    _no_process_left(str(TRAINER))


def test_console_script_that_relaunches_python(tmp_path):
    """As ms-swift's ``swift sft``: the CLI process starts ``[sys.executable, train.py]`` and waits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(
        bin_dir / "mytrain",
        f"""
        import subprocess, sys
        import torch  # the CLI imports the framework too, but never trains
        sys.exit(subprocess.call([sys.executable, {str(SIMPLE)!r}, *sys.argv[1:]]))
    """,
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = run_dlprof(
        "record", "--out", str(tmp_path / "out"), "--name", "cli", *SHORT, "--", "mytrain", "--steps", "100000", env=env
    )
    assert done.returncode == 0, done.stderr
    manifests = _manifests(tmp_path / "out" / "cli")
    assert len(manifests) == 1 and manifests[0]["script"] == ["mytrain", "--steps", "100000"]
    assert manifests[0]["process_argv"][-3:] == [str(SIMPLE), "--steps", "100000"]


def test_in_process_console_script(tmp_path):
    """As ``llamafactory-cli train`` on one device: the console script trains in its own process."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(
        bin_dir / "mycli",
        f"""
        import runpy, sys
        sys.argv = [{str(SIMPLE)!r}, *sys.argv[2:]]  # mycli train ARGS
        runpy.run_path(sys.argv[0], run_name="__main__")
    """,
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path / "out"),
        "--name",
        "cli",
        *SHORT,
        "--",
        "mycli",
        "train",
        "--steps",
        "100000",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    (manifest,) = _manifests(tmp_path / "out" / "cli")
    assert manifest["status"] == "complete" and manifest["stopped_early"]
    assert Path(manifest["process_argv"][1]).name == "mycli"


def test_a_helper_subprocess_is_not_recorded(tmp_path):
    """A data-preparation subprocess that iterates a DataLoader without training runs its course and is left out."""
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "helped",
        *SHORT,
        "--",
        "python",
        str(SIMPLE),
        "--helper",
        "--steps",
        "100000",
    )
    assert done.returncode == 0, done.stderr
    assert "helper: 800" in done.stdout  # the helper was not stopped early
    (manifest,) = _manifests(tmp_path / "helped")
    assert manifest["schedule"]["step_mode"] == "optimizer"
    assert "also iterated a DataLoader as rank 0" in done.stderr


def test_users_own_sitecustomize_still_runs(tmp_path):
    """dlprof's bootstrap sitecustomize shadows the user's: it must run the user's too, in every process."""
    user_site = tmp_path / "site"
    user_site.mkdir()
    marker = tmp_path / "markers"
    marker.mkdir()
    (user_site / "sitecustomize.py").write_text(
        f"import os\nopen(os.path.join({str(marker)!r}, str(os.getpid())), 'w').close()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(user_site)}
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path / "out"),
        "--name",
        "site",
        *SHORT,
        "--",
        "python",
        str(SIMPLE),
        "--steps",
        "100000",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    (trace,) = trace_files(tmp_path / "out" / "site")
    training_pid = trace.name.split("_")[-1].split(".")[0]  # <host>_<pid>.<ms>.pt.trace.json.gz
    assert training_pid in {p.name for p in marker.iterdir()}
