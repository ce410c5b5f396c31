"""``dlprof record --plain-launch``: the step timer of the plain launch, when a recording gets one, and the launch end
to end (a real script recorded, then launched again without the profiler)."""

from __future__ import annotations

import dataclasses
import json
import signal

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, leftover_processes, run_dlprof

from dlprof.capture.plain import plain_launch, stop_step, why_not
from dlprof.capture.plain_clock import STEPS_FILE_PREFIX, PlainClock
from dlprof.cli import cli
from dlprof.core import schema
from dlprof.results.record import RecordResult
from dlprof.trace.discover import load_run


class _Optimizer:
    pass


def test_the_clock_times_the_first_optimizer_s_steps_and_stops_after_the_last(tmp_path):
    clock = PlainClock(tmp_path, stop_step=3)
    first, other = _Optimizer(), _Optimizer()
    for _ in range(3):  # the first boundary starts the clock; two steps timed
        clock.on_optimizer_step(first)
        clock.on_optimizer_step(other)  # another optimizer's steps are no steps
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as stopped:
        clock.on_optimizer_step(first)
    assert stopped.value.code == 0
    (written,) = tmp_path.glob(f"{STEPS_FILE_PREFIX}*.json")
    steps = json.loads(written.read_text())["step_ms"]
    assert len(steps) == 3 and all(ms >= 0 for ms in steps)
    clock.write()  # once only
    assert len(list(tmp_path.iterdir())) == 1


def test_a_training_that_ended_first_leaves_what_it_timed_and_one_that_never_stepped_nothing(tmp_path):
    clock, optimizer = PlainClock(tmp_path, stop_step=50), _Optimizer()
    for _ in range(5):
        clock.on_optimizer_step(optimizer)
    clock.write()
    (written,) = tmp_path.glob(f"{STEPS_FILE_PREFIX}*.json")
    assert len(json.loads(written.read_text())["step_ms"]) == 4
    idle = tmp_path / "idle"
    idle.mkdir()
    PlainClock(idle, stop_step=50).write()
    assert list(idle.iterdir()) == []


def test_steps_that_cannot_be_saved_are_one_line_and_stop_the_training_as_asked(tmp_path, capsys):
    clock, optimizer = PlainClock(tmp_path / "gone", stop_step=1), _Optimizer()
    clock.on_optimizer_step(optimizer)
    with pytest.raises(SystemExit) as stopped:
        clock.on_optimizer_step(optimizer)
    assert stopped.value.code == 0
    said = capsys.readouterr().err
    assert said.startswith("dlprof: could not save the plain launch's steps (") and said.count("\n") == 1


def _result(**manifest_changes) -> RecordResult:
    manifest = load_run(DATA_DIR / "tiny_dlprof_trace.json").manifest
    manifest = dataclasses.replace(manifest, **manifest_changes)
    trace = DATA_DIR / "tiny_dlprof_trace.json"
    return RecordResult(
        run_dir=DATA_DIR,
        trace_path=trace,
        status=schema.STATUS_COMPLETE,
        exit_code=0,
        error=None,
        steps_recorded=3,
        workers_seen=1,
        trace_paths=(trace,),
        manifests=(manifest,),
    )


def test_the_launch_stops_at_the_recording_s_last_reference_step():
    result = _result()
    phases = result.manifests[0].step_clock.phase
    assert stop_step(result) == len(phases) - phases[::-1].index("after")
    assert why_not(result) is None


def test_what_gets_no_plain_launch_is_said_and_nothing_is_launched():
    result = _result()
    ranks = dataclasses.replace(result, trace_paths=result.trace_paths * 2, manifests=result.manifests * 2)
    assert plain_launch(["false"], ranks) == (
        "dlprof: no plain launch: the recording has 2 ranks; plain launches are timed for one process only",
        None,
    )
    schedule = dataclasses.replace(result.manifests[0].schedule, step_mode="batch")
    batches = _result(schedule=schedule)
    assert plain_launch(["false"], batches) == (
        "dlprof: no plain launch: the recording's steps were not optimizer steps, which are all a plain launch can"
        " time",
        None,
    )
    clock = result.manifests[0].step_clock
    before_only = dataclasses.replace(clock, phase=tuple("before" if p == "after" else p for p in clock.phase))
    assert plain_launch(["false"], _result(step_clock=before_only)) == (
        "dlprof: no plain launch: the recording timed no reference step after its window",
        None,
    )


def test_a_launch_that_times_nothing_or_is_stopped_leaves_the_recording_as_it_was(tmp_path, monkeypatch):
    from dlprof.capture import child

    run = tmp_path / "run"
    run.mkdir()
    trace = run / "h_1.2.pt.trace.json.gz"
    trace.write_bytes(b"recorded")
    result = dataclasses.replace(_result(), run_dir=run, trace_path=trace, trace_paths=(trace,))
    # A command that never steps an optimizer: nothing timed, nothing written.
    note, stopped = plain_launch(["python", "-c", "pass"], result)
    assert (note, stopped) == (
        "dlprof: the plain launch timed no step (it exited with code 0); nothing to compare",
        None,
    )
    # Stopped by Ctrl-C: said, and the signal handed back for dlprof record's exit code.
    monkeypatch.setattr(child, "run_child", lambda *args, **kwargs: (130, [], signal.SIGINT))
    note, stopped = plain_launch(["python", "-c", "pass"], result)
    assert note == "dlprof: the plain launch was stopped; the recording is complete without it"
    assert stopped == signal.SIGINT
    assert sorted(p.name for p in run.iterdir()) == [trace.name] and trace.read_bytes() == b"recorded"
    # A training that failed after 3 steps: what it timed is kept, and the line says how it ended.

    def failed_after_three(argv, env, interval_ms, scratch, tick=None):
        (scratch / f"{STEPS_FILE_PREFIX}7.json").write_text(json.dumps({"step_ms": [10.0, 11.0, 12.0]}))
        return 1, [], None

    monkeypatch.setattr(child, "run_child", failed_after_three)
    note, stopped = plain_launch(["python", "-c", "pass"], result)
    path = schema.plain_launch_path(trace)
    assert stopped is None
    assert note == f"dlprof: the plain launch timed 3 steps (the training ended after 3, exit code 1): {path}"
    written = json.loads(path.read_text())
    assert (written["step_ms"], written["exit_code"], written["trace"]) == ([10.0, 11.0, 12.0], 1, trace.name)


def test_a_job_of_several_machines_gets_no_plain_launch(tmp_path):
    done = CliRunner().invoke(
        cli,
        [
            "record",
            "--out",
            str(tmp_path),
            "--plain-launch",
            "--",
            "torchrun",
            "--nnodes",
            "2",
            "--rdzv-id",
            "j1",
            "t.py",
        ],
    )
    assert done.exit_code == 2
    assert "--plain-launch: torchrun runs a job of several processes" in done.output
    assert list(tmp_path.iterdir()) == []  # nothing was run or claimed


PLAIN_SCRIPT = """
import json, os, sys, time, torch
from torch.utils.data import DataLoader

class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 4 * 30  # 30 batches an epoch: whole epochs are timed

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((4,), float(i))

if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=4, num_workers=2)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for epoch in range(1000):
        for batch in loader:
            time.sleep(0.002)
            model(batch).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            seen.append(torch.autograd._profiler_enabled())
            with open(sys.argv[1], "a") as out:
                out.write(json.dumps({"pid": os.getpid(), "profiled": any(seen),
                    "instrumented": hasattr(DataLoader.__iter__, "_dlprof_original")}) + "\\n")
"""


@pytest.mark.slow
def test_a_recording_then_its_plain_launch_reach_the_report(tmp_path):
    script = tmp_path / "train_plain.py"
    script.write_text(PLAIN_SCRIPT)
    log = tmp_path / "steps.jsonl"
    args = ("--wait", "1", "--warmup", "1", "--active", "3", "--reference-steps", "10")
    done = run_dlprof(
        "record",
        "--out",
        str(tmp_path),
        "--name",
        "p",
        *args,
        "--plain-launch",
        "--",
        "python",
        str(script),
        str(log),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    (trace,) = (tmp_path / "p").glob("*" + schema.TRACE_SUFFIX)
    sidecar = schema.plain_launch_path(trace)
    assert "dlprof: the plain launch timed" in done.stdout and str(sidecar) in done.stdout
    # No other file at the top of the run directory: HTA reads every .json there as a trace.
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted([trace.name, schema.PLAIN_LAUNCH_DIR])
    launch = json.loads(sidecar.read_text())
    manifest = load_run(trace).manifest
    phases = manifest.step_clock.phase
    last_after = len(phases) - phases[::-1].index("after")
    assert launch["stop_step"] == last_after and len(launch["step_ms"]) == last_after
    assert launch["trace"] == trace.name and launch["exit_code"] == 0
    # Two launches of the script: the recorded one profiled and instrumented, the plain one neither; the plain one
    # stopped inside the optimizer step that ended its last step to time.
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    recorded_pid, plain_pid = rows[0]["pid"], rows[-1]["pid"]
    assert recorded_pid != plain_pid
    plain_rows = [r for r in rows if r["pid"] == plain_pid]
    assert len(plain_rows) == last_after
    assert not any(r["profiled"] or r["instrumented"] for r in plain_rows)
    recorded_rows = [r for r in rows if r["pid"] == recorded_pid]
    assert recorded_rows[-1]["profiled"] and all(r["instrumented"] for r in recorded_rows)
    assert leftover_processes(script.name) == []

    analyzed = run_dlprof("analyze", str(tmp_path / "p"))
    assert analyzed.returncode == 0, analyzed.stderr
    assert "a plain launch of the same command ran the same" in analyzed.stdout
    report = json.loads(run_dlprof("analyze", "--format", "json", str(tmp_path / "p")).stdout)
    plain = report["unprofiled"]["plain_launch"]
    assert plain["steps"] > 0 and plain["steps_per_s"] > 0 and plain["recorded_steps_per_s"] > 0
    # A damaged file is a one-line error naming it, exit code 2.
    sidecar.write_text("{")
    broken = run_dlprof("analyze", str(tmp_path / "p"))
    assert broken.returncode == 2 and str(sidecar) in broken.stderr and "Traceback" not in broken.stderr
