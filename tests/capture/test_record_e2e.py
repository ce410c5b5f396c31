"""`dlprof record` end to end: the built-in workload and user scripts, in real training processes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SCRIPTS_DIR, check_recorded_traces, leftover_processes, load_trace, run_dlprof, trace_files

from dlprof import analyze
from dlprof.core import schema
from dlprof.core.manifest import EPOCH_SETTLE_STEPS, MANIFEST_VERSION, MAX_REFERENCE_FACTOR, parse_manifest

pytestmark = pytest.mark.slow


def x_events(doc: dict, **match) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and all(e.get(k) == v for k, v in match.items())]


def assert_batches_ready_before_next_returns(doc: dict) -> int:
    """Every batch's spans end before the main process's __next__ that returned it ends; returns the count checked."""
    batch_end = {}
    for span in x_events(doc, cat=schema.CATEGORY):
        key = tuple(span["args"][k] for k in (schema.ARG_LOADER, schema.ARG_EPOCH, schema.ARG_BATCH))
        batch_end[key] = max(batch_end.get(key, 0.0), span["ts"] + span["dur"])
    checked = 0
    for event in doc["traceEvents"]:
        if event.get("ph") != "X" or not schema.is_dataloader_next(event["name"]):
            continue
        key = tuple(event["args"][k] for k in (schema.ARG_LOADER, schema.ARG_EPOCH, schema.ARG_BATCH))
        assert key in batch_end, f"no spans for batch {key}"
        assert batch_end[key] <= event["ts"] + event["dur"], f"batch {key} ends after its __next__"
        checked += 1
    return checked


def test_run_directory_holds_one_self_contained_trace(workload_run_2):
    entries = sorted(p.name for p in workload_run_2.iterdir())
    assert len(entries) == 1 and entries[0].endswith(schema.TRACE_SUFFIX)  # no scratch, no other .json/.gz


def test_two_workers_have_tracks_spans_and_aligned_batches(workload_run_2):
    doc = load_trace(workload_run_2)
    names = {
        e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"
    }
    worker_pids = {pid for pid, name in names.items() if name.startswith("DataLoader worker")}
    spans = x_events(doc, cat=schema.CATEGORY)
    worker_of = {s["pid"]: s["args"][schema.ARG_WORKER] for s in spans}
    assert {names[p] for p in worker_pids} == {f"DataLoader worker {worker_of[p]} (pid {p})" for p in worker_of}
    assert {s["pid"] for s in spans} == worker_pids
    assert {s["name"] for s in spans} == set(schema.SPAN_NAMES)
    assert {s["args"][schema.ARG_WORKER] for s in spans} == {0, 1}
    assert all(s["args"][schema.ARG_CPU_US] >= 0 for s in spans)
    batches = [s for s in spans if s["name"] == schema.SPAN_BATCH]
    assert all(0 <= s["args"][schema.ARG_RUNQ_US] <= s["dur"] + 1 for s in batches)
    assert assert_batches_ready_before_next_returns(doc) == 8  # one batch per recorded step


def test_manifest_describes_the_run(workload_run_2):
    manifest = load_trace(workload_run_2)[schema.MANIFEST_KEY]
    parsed, problems = parse_manifest(manifest)
    assert problems == () and parsed.manifest_version == MANIFEST_VERSION
    assert manifest["status"] == schema.STATUS_COMPLETE and manifest["error"] is None
    assert manifest["steps"]["recorded"] == 8
    loader = manifest["loader"]
    assert (loader["num_workers"], loader["batch_size"], loader["pin_memory"]) == (2, 2, False)
    assert (loader["prefetch_factor"], loader["persistent_workers"]) == (2, False)
    assert manifest["host"]["usable_cores"] >= 1 and manifest["host"]["ram_total_mib"] > 0
    assert {"torch", "transformers", "peft", "dlprof"} <= set(manifest["versions"])
    assert "record" in manifest["command"]
    alignment = manifest["clock"]["alignment"]
    assert alignment["next_events_matched"] == 8 and alignment["max_offset_us"] == 0.0
    # measured for the throughput model: a ready batch's hand-off costs something, and so does a step
    handoff = manifest["host"]["handoff"]
    assert handoff["per_batch_ms"] + handoff["per_tensor_ms"] > 0
    assert manifest["host"]["worker_startup"]["fixed_ms"] + manifest["host"]["worker_startup"]["per_worker_ms"] > 0
    main_cpu = manifest["main_process_cpu"]
    assert main_cpu["cpu_ms_per_step"] > 0 and 0 <= main_cpu["runq_ms_per_step"] <= main_cpu["wall_ms_per_step"]
    # Every step is timed, profiled or not: start-up (1), the window (2 + 8), then unprofiled steps until 6 reference
    # steps are done and, epochs being short (214 examples / 2 = 107 batches), one whole epoch: from the boundary at
    # step 107 to the next one, at step 214, the last step run.
    clock = manifest["step_clock"]
    phases = clock["phase"]
    assert phases[:11] == ["before"] + ["profiled"] * 10 and set(phases[11:]) == {"after"}
    assert len(phases) == manifest["steps"]["run"] == 2 * 107 + 1 and manifest["stopped_early"] is True
    assert [i for i, started in enumerate(clock["epoch_start"]) if started] == [0, 107, 214]
    assert not any(clock["fork_probe"])  # a run with workers needs no fork probe
    assert all(w > 0 for w in clock["wall_ms"]) and all(0 <= q <= w for q, w in zip(clock["wait_ms"], clock["wall_ms"]))
    # The main process's page faults and kernel time, every step; the kernel's share of a step's CPU never exceeds it.
    assert len(clock["faults"]) == len(clock["sys_ms"]) == len(phases) and clock["faults"][0] > 0
    assert all(f >= 0 for f in clock["faults"]) and all(
        0 <= s <= c + 1 for s, c in zip(clock["sys_ms"], clock["cpu_ms"])
    )
    # The training thread's own CPU is part of the process's (over the run: the process clock may lag its other
    # threads' time by a scheduler tick at any one step); its other threads' CPU in the waits is never negative.
    assert len(clock["thread_cpu_ms"]) == len(clock["wait_others_cpu_ms"]) == len(phases)
    assert 0 < sum(clock["thread_cpu_ms"]) <= sum(clock["cpu_ms"]) + 10 and min(clock["thread_cpu_ms"]) >= 0
    assert all(o >= 0 for o in clock["wait_others_cpu_ms"])
    assert loader["length"] == 107 and [e["batches"] for e in loader["epochs"]] == [107, 107, 1]
    assert loader["epochs"][0]["end_ms"] > 0 and all(e["first_batch_ms"] > 0 for e in loader["epochs"])
    roles = [p["role"] for p in manifest["memory"]["processes"]]
    assert roles.count("main") == 1 and roles.count("worker") <= 6  # two workers per epoch, each if sampled


def test_unprofiled_speed_and_overhead_reach_the_report(workload_run_2):
    report = analyze(workload_run_2).runs[0]
    unprofiled = report.unprofiled
    # The whole epoch timed after the window, less its start's transient (at least the steps settling after the
    # workers start, and until every worker has waited), in whole rounds of the 2 workers' delivery.
    assert unprofiled is not None and unprofiled.overhead_pct is not None
    left_out = 107 - unprofiled.reference_steps
    assert EPOCH_SETTLE_STEPS <= unprofiled.speed.transient_steps <= left_out <= unprofiled.speed.transient_steps + 1
    assert unprofiled.epoch.boundaries_measured == 1 and unprofiled.epoch.restart_ms >= 0
    assert unprofiled.epoch.steps_per_epoch == 107 and unprofiled.epoch.whole_epoch_steps_per_s > 0
    # Predicted for the recorded count over whole epochs: the whole epoch as measured (steady step + its restart). The
    # steady step is timed in whole rounds of the workers' delivery and the epoch over all its 107 steps: one step's
    # deviation from the steady one apart (0.1-0.2 % seen), never more than 1 %.
    assert report.advice.predicted[2].epoch_steps_per_s == pytest.approx(unprofiled.epoch_steps_per_s, rel=1e-2)
    prediction = report.advice.predicted[2]
    assert prediction.epoch_steps_per_s is not None and prediction.epoch_steps_per_s <= prediction.steps_per_s


def test_a_run_without_workers_probes_what_forking_costs(workload_run_0):
    manifest = load_trace(workload_run_0)[schema.MANIFEST_KEY]
    probes = [i for i, probed in enumerate(manifest["step_clock"]["fork_probe"]) if probed]
    assert probes == [11 + 2]  # the step that began after the 2nd unprofiled step
    epoch = analyze(workload_run_0).runs[0].unprofiled.epoch
    assert epoch.fork_probe_ms is not None and epoch.fork_probe_ms >= 0
    assert leftover_processes("dlprof.workloads.lora") == []


HOUR_LONG_SCRIPT = """
import atexit, sys, time, torch
from torch.utils.data import DataLoader
marker = sys.argv[1]
atexit.register(lambda: open(marker + ".atexit", "w").write("ran"))
loader = DataLoader(list(range(10**7)), batch_size=4, num_workers=1)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    for step, batch in enumerate(loader):  # 2.5 million steps: hours
        time.sleep(0.002)
        model(batch.float()).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == 10**6:
            raise SystemExit("should have been stopped long before")
finally:
    open(marker + ".finally", "w").write("ran")
"""


def test_a_long_training_is_stopped_cleanly_after_the_window(tmp_path):
    script = tmp_path / "train_forever.py"
    script.write_text(HOUR_LONG_SCRIPT)
    marker = tmp_path / "marker"
    started = time.monotonic()
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "long",
        "--wait",
        "2",
        "--warmup",
        "1",
        "--active",
        "5",
        "--reference-steps",
        "10",
        "--",
        "python",
        str(script),
        str(marker),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    # At least the 10 reference steps asked for; steps of 2 ms never make throughput.MIN_SECONDS, so the reference
    # phase goes on to its bound, 4 x --reference-steps.
    said = re.search(
        r"stopped training after the window and (\d+) unprofiled reference steps; add --run-to-end", done.stdout
    )
    assert said is not None, done.stdout
    timed = int(said.group(1))
    assert 10 <= timed <= MAX_REFERENCE_FACTOR * 10
    assert (tmp_path / "marker.finally").exists() and (tmp_path / "marker.atexit").exists()  # the script's cleanup ran
    manifest = load_trace(tmp_path / "long")[schema.MANIFEST_KEY]
    assert (
        manifest["status"] == schema.STATUS_COMPLETE
        and manifest["stopped_early"] is True
        and manifest["exit_code"] == 0
    )
    # The message counts the steady steps timed, as dlprof analyze does: those after the export pause's refill left
    # out of the reference steps run.
    after = manifest["step_clock"]["phase"].count("after")
    assert timed <= after <= MAX_REFERENCE_FACTOR * 10 and manifest["steps"]["run"] == 2 + 1 + 5 + after
    assert leftover_processes(script.name) == []


SHORT_EPOCHS_SCRIPT = """
import time, torch
from torch.utils.data import DataLoader
loader = DataLoader(list(range(4 * 30)), batch_size=4)  # 30 batches an epoch: whole epochs are timed
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(1000):
    for batch in loader:
        time.sleep(0.001)
        model(batch.float().unsqueeze(1).expand(-1, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_the_stop_message_counts_the_reference_steps_the_report_uses(tmp_path):
    """With short epochs the recorder times whole epochs, not the 6 steps asked for: the message says how many it
    timed, as the report counts them."""
    script = tmp_path / "train_short_epochs.py"
    script.write_text(SHORT_EPOCHS_SCRIPT)
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "epochs",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "3",
        "--reference-steps",
        "6",
        "--",
        "python",
        str(script),
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    said = re.search(r"stopped training after the window and (\d+) unprofiled reference steps", done.stdout)
    assert said is not None, done.stdout
    counted = analyze(tmp_path / "epochs").runs[0].unprofiled.reference_steps
    assert int(said.group(1)) == counted and counted > 6
    assert leftover_processes(script.name) == []


def test_run_to_end_lets_the_script_finish(tmp_path, user_script):
    done = run_dlprof(
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
        "3",
        "--reference-steps",
        "2",
        "--run-to-end",
        "--",
        "python",
        str(user_script),
        "--steps",
        "20",
        "--sleep-ms",
        "0",
    )
    assert done.returncode == 0 and "trained 20 steps" in done.stdout and "--run-to-end" not in done.stdout
    manifest = load_trace(tmp_path / "full")[schema.MANIFEST_KEY]
    assert manifest["stopped_early"] is False and manifest["steps"]["run"] == 20


def test_memory_is_known_for_main_and_workers(workload_run_2):
    doc = load_trace(workload_run_2)
    counters = [e for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert counters and all(c["args"]["pss_mib"] > 0 for c in counters)
    # Sampling reads one process at a time and backs off to 2 % of a core; every process is read at least
    # once, a new worker first, so the report knows each worker's memory that served the window.
    summary = {p["pid"]: p for p in doc[schema.MANIFEST_KEY]["memory"]["processes"]}
    window_workers = {
        e["pid"]
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e["args"].get("name", "").startswith("DataLoader worker")
    }
    assert len(window_workers) == 2 and window_workers <= set(summary)
    assert all(summary[pid]["pss_mib_last"] > 0 for pid in window_workers)
    loader = analyze(workload_run_2).runs[0].loader
    assert all(w.pss_mib_last for w in loader.workers)


def test_num_workers_0_spans_in_the_main_process(workload_run_0):
    doc = load_trace(workload_run_0)
    manifest = doc[schema.MANIFEST_KEY]
    main_pid = next(e["pid"] for e in x_events(doc) if e["name"].startswith("ProfilerStep#"))
    spans = x_events(doc, cat=schema.CATEGORY)
    assert {(s["pid"], s["tid"]) for s in spans} == {(main_pid, schema.MAIN_LOADER_TID_OFFSET + main_pid)}
    assert {s["args"][schema.ARG_WORKER] for s in spans} == {-1}
    assert manifest["loader"]["num_workers"] == 0 and manifest["loader"]["prefetch_factor"] is None
    assert manifest["workers"] == []
    assert assert_batches_ready_before_next_returns(doc) == 8


@pytest.fixture
def user_script(tmp_path: Path) -> Path:
    """A copy of the slow-dataset script under a unique path, to find its processes by command line."""
    script = tmp_path / f"train_{os.getpid()}_{time.monotonic_ns()}.py"
    shutil.copy(SCRIPTS_DIR / "slow_dataset.py", script)
    return script


def test_user_script_output_and_exit_code_pass_through(tmp_path, user_script):
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "exit3",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "4",
        "--",
        "python",
        str(user_script),
        "--steps",
        "8",
        "--sleep-ms",
        "1",
        "--exit-code",
        "3",
    )
    assert done.returncode == 3
    assert "trained 8 steps" in done.stdout
    manifest = load_trace(tmp_path / "exit3")[schema.MANIFEST_KEY]
    assert manifest["exit_code"] == 3 and manifest["status"] == schema.STATUS_PARTIAL
    assert manifest["error"] == "the script exited with code 3"
    assert manifest["script"][-1] == "3"


def test_exception_in_a_worker_leaves_a_partial_trace_and_no_worker(tmp_path, user_script):
    # batch size 4: sample 40 is in batch 10, inside the recorded window (steps 3..14)
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "crash",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "12",
        "--",
        "python",
        str(user_script),
        "--num-workers",
        "2",
        "--steps",
        "30",
        "--sleep-ms",
        "1",
        "--fail-in-worker-at",
        "40",
    )
    assert done.returncode == 1
    assert "ValueError: sample 40 is corrupt" in done.stderr  # the script's own traceback passes through
    doc = load_trace(tmp_path / "crash")
    manifest = doc[schema.MANIFEST_KEY]
    assert manifest["status"] == schema.STATUS_PARTIAL
    assert manifest["error"].startswith("ValueError: Caught ValueError in DataLoader worker process")
    assert 1 <= manifest["steps"]["recorded"] < 12
    assert x_events(doc, cat=schema.CATEGORY)
    assert leftover_processes(user_script.name) == []


def test_ctrl_c_leaves_a_partial_trace_and_no_worker(tmp_path, user_script):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlprof",
            "record",
            "--out",
            str(tmp_path),
            "--name",
            "interrupted",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "100000",
            "--",
            "python",
            str(user_script),
            "--num-workers",
            "2",
            "--steps",
            "100000",
            "--sleep-ms",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        spans_dir = tmp_path / "interrupted" / schema.SCRATCH_DIR / "spans"
        while (
            time.monotonic() < deadline and len(list(spans_dir.glob("*/*.spans"))) < 3
        ):  # main + 2 workers logging (spans/<pid>/)
            time.sleep(0.2)
        time.sleep(2.0)  # well inside the recorded window
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    manifest = load_trace(tmp_path / "interrupted")[schema.MANIFEST_KEY]
    assert manifest["status"] == schema.STATUS_PARTIAL
    assert manifest["error"] == "interrupted (KeyboardInterrupt)"
    assert manifest["steps"]["recorded"] > 0
    assert leftover_processes(user_script.name) == []
    check_recorded_traces(tmp_path)


def test_script_failing_at_once_is_one_line_and_leaves_no_run(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\nraise ImportError('no module named missing_dep')\n")
    done = run_dlprof("record", "--out", str(tmp_path / "traces"), "--name", "broken", "--", "python", str(script))
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("dlprof: error: ") and "ImportError: no module named missing_dep" in last and "fix" in last
    assert not (tmp_path / "traces" / "broken").exists()


def test_too_few_steps_says_how_to_fix(tmp_path, user_script):
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "short",
        "--",
        "python",
        str(user_script),
        "--steps",
        "3",
        "--sleep-ms",
        "0",
    )
    assert done.returncode == 2
    assert "ran 3 training steps" in done.stderr and "lower --wait/--warmup" in done.stderr
    assert not (tmp_path / "short").exists()
    assert trace_files(tmp_path) == []
