"""``dlprof analyze --processes N`` and ``--ray``: ranks analysed in worker processes (or on Ray) give the report
that ``--processes 1`` gives, byte for byte; only small summaries travel; progress goes to stderr; bad options are one
line."""

from __future__ import annotations

import gzip
import importlib.util
import json
import multiprocessing.context
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, assert_one_line_error, invoke, run_dlprof

from dlprof.analysis.steps import bars_between
from dlprof.core.errors import DlprofError, UsageError
from dlprof.trace.discover import load_run
from dlprof.trace.run import TraceRun
from dlprof.workflows import analyze as analyze_module
from dlprof.workflows import output as output_module
from dlprof.workflows import parallel
from dlprof.workflows.analyze import AnalyzedRank, FailedRank, build_report, summarize_trace

RANKS = DATA_DIR / "ranks"


def _job(tmp_path: Path, ranks: int = 3, source: Path = DATA_DIR / "tiny_dlprof_trace.json") -> Path:
    """A run of ``ranks`` distinct ranks made from one real trace: each its own rank, and a clock base a little
    later than the previous rank's (as ranks of one job), one with a slower DataLoader."""
    document = json.loads(source.read_text())
    run = tmp_path / "job"
    run.mkdir()
    for k in range(ranks):
        copy = dict(document)
        copy["distributedInfo"] = {"backend": "gloo", "rank": k, "world_size": ranks}
        copy["baseTimeNanoseconds"] = document.get("baseTimeNanoseconds", 0) + k * 137_000
        if k == 1:  # its waits for data last longer: the slowest rank, the one the others wait for
            copy["traceEvents"] = [
                {**e, "dur": e["dur"] * 1.5} if "DataLoader" in str(e.get("name")) and "dur" in e else e
                for e in document["traceEvents"]
            ]
        (run / f"host_{k}.pt.trace.json").write_text(json.dumps(copy))
    return run


def _json_report(*args: str) -> str:
    done = run_dlprof("analyze", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_processes_2_gives_the_report_of_processes_1_byte_for_byte(tmp_path):
    for run in (RANKS, _job(tmp_path)):
        one = _json_report(str(run), "--processes", "1")
        assert _json_report(str(run), "--processes", "2") == one
        assert len(json.loads(one)["ranks"]["ranks"]) >= 2  # several ranks, side by side


def test_worker_processes_give_what_this_process_gives(tmp_path):
    run = _job(tmp_path, 4)
    files = sorted(run.iterdir())
    here = analyze_module._run_report(files, [summarize_trace(f, "job") for f in files], [])
    assert build_report(run, processes=3).runs == [here]


def test_a_worker_that_dies_or_fails_is_named():
    with pytest.raises(DlprofError, match=r"^3: its worker process died \(exit code 3; out of memory\?\)"):
        parallel.run_tasks(os._exit, [(3,), (3,)], processes=2)
    with pytest.raises(RuntimeError, match="ValueError: invalid literal"):
        parallel.run_tasks(int, [("x",), ("1",)], processes=2)
    assert parallel.run_tasks(int, [("2",), ("1",), ("3",)], processes=2, sizes=[1, 5, 2]) == [2, 1, 3]  # in order


def _end_the_fork_server():
    """End this process's fork server and reap it, as ``dlprof record`` run in this process once did (ending every
    process it had not started itself, SIGKILL after SIGTERM); the resource tracker too (which ignores SIGTERM)."""
    from multiprocessing import forkserver, resource_tracker

    for pid in (forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid):
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


@pytest.mark.filterwarnings("ignore:resource_tracker")
def test_a_fork_server_ended_by_another_is_started_again(tmp_path, monkeypatch):
    """In one process: a report with worker processes, the fork server ended and reaped by someone else, then the
    same report again (multiprocessing alone raised ChildProcessError, and the report came out empty)."""
    monkeypatch.setattr(parallel, "only_thread", lambda: False)  # a caller with threads: workers from the server
    run = _job(tmp_path, 2)
    one = invoke("analyze", str(run), "--format", "json", "--processes", "1")
    two = invoke("analyze", str(run), "--format", "json", "--processes", "2")
    assert two.exit_code == 0 and two.stdout == one.stdout
    _end_the_fork_server()
    again = invoke("analyze", str(run), "--format", "json", "--processes", "2")
    assert again.exit_code == 0, again.output
    assert again.stdout == one.stdout and again.stderr == ""
    assert parallel.run_tasks(int, [("2",), ("1",)], processes=2) == [2, 1]


def test_when_no_worker_process_starts_the_work_is_done_here(monkeypatch, capsys):
    def refused(self):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "start", refused)
    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", refused)
    assert parallel.run_tasks(int, [("2",), ("1",), ("3",)], processes=2) == [2, 1, 3]
    assert capsys.readouterr().err.splitlines() == [
        "dlprof: no worker process could be started ([Errno 111] Connection refused); analysing in this process instead"
    ]


def test_an_empty_rendering_is_an_error_not_silence(monkeypatch):
    monkeypatch.setattr(output_module, "render", lambda result, fmt: "\n")
    assert_one_line_error(invoke("analyze", str(RANKS), "--processes", "1"), "came out empty")


def test_a_directory_of_runs_in_worker_processes(tmp_path):
    _job(tmp_path, 2)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "trace.json").write_text((DATA_DIR / "tiny_cuda_trace.json").read_text())
    sequential = build_report(tmp_path, processes=1)
    assert build_report(tmp_path, processes=2) == sequential
    assert len(sequential.runs) == 2


def test_the_default_is_cores_bounded_by_memory():
    mib = 1 << 20
    assert parallel.default_processes([17_000_000] * 16, cores=2, memory=20_000 * mib) == 2
    assert parallel.default_processes([17_000_000] * 1, cores=8, memory=20_000 * mib) == 1  # one task, one process
    # 256 ranks of 1 GB on 64 cores and 16 GiB: each worker needs 40 MiB + 1.6 GB, so 10 fit.
    assert parallel.default_processes([10**9] * 256, cores=64, memory=16 * 1024 * mib) == 10
    assert parallel.default_processes([10**10] * 4, cores=4, memory=1024 * mib) == 1  # never fewer than one
    assert parallel.default_processes([10**6] * 4, cores=3, memory=None) == 3  # memory unknown: the cores


def test_json_bytes_reads_the_size_a_gzip_file_records(tmp_path):
    trace = tmp_path / "t.json.gz"
    raw = (DATA_DIR / "tiny_dlprof_trace.json").read_bytes()
    trace.write_bytes(gzip.compress(raw))
    assert parallel.json_bytes(trace) == len(raw)
    assert parallel.json_bytes(DATA_DIR / "tiny_dlprof_trace.json") == len(raw)
    assert parallel.json_bytes(tmp_path / "missing.json") == 0


def test_a_worker_hands_back_a_summary_not_the_trace():
    summary = summarize_trace(DATA_DIR / "tiny_dlprof_trace.json", "tiny")
    assert isinstance(summary, AnalyzedRank)
    assert not any(isinstance(value, TraceRun) for value in vars(summary).values())
    failed = summarize_trace(DATA_DIR / "README.md", "x")
    assert isinstance(failed, FailedRank) and failed.loading


def test_lanes_from_summaries_are_the_traces_own(monkeypatch):
    """The timeline bars a summary keeps, clipped to a stretch, are what the trace gives for that stretch; past the
    steps it kept, the trace is read again."""
    trace = DATA_DIR / "hta_trace_diff_control.json.gz"  # 6 steps
    run = load_run(trace, "x")
    lo, hi = run.steps[0].start_us, run.steps[-1].end_us
    stretches = [(lo + f * (hi - lo), lo + g * (hi - lo)) for f, g in ((0, 0.3), (0.2, 0.6), (0.5, 1.0), (-1, 2))]
    summary = summarize_trace(trace, "x")
    for start, end in stretches:
        assert analyze_module._bars_between(summary, start, end) == bars_between(run, start, end)
    monkeypatch.setattr(analyze_module, "LANE_STEPS", 2)
    short = summarize_trace(trace, "x")
    assert len(short.step_bars) == 2
    for start, end in stretches:
        assert analyze_module._bars_between(short, start, end) == bars_between(run, start, end)


def test_a_job_whose_ranks_stepped_apart_reads_the_lanes_again(tmp_path, monkeypatch):
    run = _job(tmp_path)
    whole = build_report(run, processes=1)
    monkeypatch.setattr(analyze_module, "LANE_STEPS", 0)  # nothing kept: every lane from its trace again
    assert build_report(run, processes=1) == whole


def test_errors_are_the_same_in_worker_processes(tmp_path):
    run = _job(tmp_path, 2)
    (run / "broken.pt.trace.json").write_text("{not json")
    one = invoke("analyze", str(run), "--processes", "1")
    two = invoke("analyze", str(run), "--processes", "2")
    assert_one_line_error(two, "broken.pt.trace.json")
    assert two.stderr == one.stderr


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_a_bad_processes_value_is_one_line(value):
    assert_one_line_error(invoke("analyze", str(RANKS), "--processes", value), "--processes", repr(value), "1 or more")


def test_the_old_jobs_option_still_works_hidden_and_not_with_processes():
    """``--jobs`` is ``--processes``'s old name: it works as before, the help does not show it, and giving both is
    refused in one line."""
    old = invoke("analyze", str(RANKS), "--format", "json", "--jobs", "1")
    assert old.exit_code == 0, old.stderr
    assert old.stdout == invoke("analyze", str(RANKS), "--format", "json", "-j", "1").stdout
    help_text = invoke("analyze", "--help").stdout
    assert "--processes" in help_text and "-j" in help_text and "--jobs" not in help_text
    assert_one_line_error(invoke("analyze", str(RANKS), "--jobs", "1", "-j", "2"), "--jobs", "--processes")
    assert_one_line_error(invoke("analyze", str(RANKS), "--jobs", "0"), "1 or more", "--processes")


@pytest.mark.parametrize("alone", [True, False])
def test_workers_fork_from_a_caller_alone_else_from_the_fork_server(monkeypatch, alone):
    monkeypatch.setattr(parallel, "only_thread", lambda: alone)
    parents = parallel.run_tasks(os.getppid, [(), ()], processes=2)
    if alone:
        assert parents == [os.getpid(), os.getpid()]
    else:
        assert len(set(parents)) == 1 and parents[0] != os.getpid()  # the fork server, one for both


def test_only_thread_sees_a_thread_started_by_anyone():
    import threading

    release = threading.Event()
    waiting = threading.Thread(target=release.wait)
    waiting.start()
    try:
        assert not parallel.only_thread()
    finally:
        release.set()
        waiting.join()
    done = subprocess.run(
        [sys.executable, "-c", "from dlprof.workflows import parallel; print(parallel.only_thread())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "True"


def test_progress_of_worker_processes_needs_no_thread(monkeypatch, capsys):
    """With worker processes the loop that waits for them says the progress (a forking caller must hold no thread)."""
    monkeypatch.setattr(parallel, "PROGRESS_AFTER_S", 0.1)
    monkeypatch.setattr(parallel, "only_thread", lambda: True)
    started = []
    monkeypatch.setattr(parallel.threading.Timer, "start", lambda self: started.append(self))
    assert parallel.run_tasks(time.sleep, [(0.3,)] * 4, processes=2) == [None] * 4
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "dlprof: analyzed 0/4 ranks" and lines[-1] == "dlprof: analyzed 4/4 ranks"
    assert started == []


def test_progress_goes_to_stderr_only_for_long_analyses(capsys):
    counter = parallel.Counter(3, after_s=0.05)
    counter.start()
    counter.step()
    time.sleep(0.3)
    counter.step()
    counter.step()
    counter.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "dlprof: analyzed 1/3 ranks" in captured.err and "dlprof: analyzed 3/3 ranks" in captured.err
    quick = parallel.Counter(2)
    quick.start()
    quick.step()
    quick.step()
    quick.close()
    assert capsys.readouterr().err == ""  # done within 2 s: nothing said


def test_json_to_stdout_stays_json_with_processes(tmp_path):
    done = run_dlprof("analyze", str(_job(tmp_path)), "--format", "json", "--processes", "2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "dlprof.report/1"


def test_an_unreachable_ray_address_is_one_line_at_once():
    started = time.perf_counter()
    result = invoke("analyze", str(RANKS), "--ray", "127.0.0.1:1")
    if importlib.util.find_spec("ray") is None:
        assert_one_line_error(result, 'pip install "dlprof[ray]"')
    else:
        assert_one_line_error(result, "--ray 127.0.0.1:1: cannot reach 127.0.0.1:1")
    assert time.perf_counter() - started < 30  # not Ray's minutes of retrying
    assert parallel._unreachable("local") is None and parallel._unreachable("") is None


def test_ray_missing_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    with pytest.raises(UsageError, match=r'pip install "dlprof\[ray\]"'):
        build_report(RANKS, ray="local")
    result = invoke("analyze", str(RANKS), "--ray", "local")
    assert_one_line_error(result, "--ray", 'pip install "dlprof[ray]"')


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='Ray is not installed (pip install "dlprof[ray]")')
def test_ray_local_gives_the_report_of_processes_1(tmp_path):
    """Starts a local Ray cluster (15-25 s on 2 cores), runs the ranks' tasks there, shuts it down."""
    _job(tmp_path)  # named relative to the caller's directory, as a Ray worker (elsewhere) must find it
    started = time.perf_counter()
    done = run_dlprof("analyze", "job", "--format", "json", "--ray", "local", timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - started < 120
    one = run_dlprof("analyze", "job", "--format", "json", "--processes", "1", cwd=tmp_path)
    assert done.stdout == one.stdout and one.returncode == 0
    assert json.loads(done.stdout)["run"]["trace_file"].startswith("job/")
    assert "Traceback" not in done.stderr
