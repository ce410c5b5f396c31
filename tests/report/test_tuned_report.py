"""The training after the trials (``--then best|keep``) as every report format says it: the hand-written trace with
trials (tests/data/tiny_trials_trace.json), its step clock extended by hand with the steps after the trials."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA_DIR

from dlprof.core import schema
from dlprof.core.manifest import PHASE_TUNED, Manifest, Then
from dlprof.core.schema import STATUS_PARTIAL, STATUS_TRAINING
from dlprof.report import renderer
from dlprof.report.tuning import status_note, tuned_line
from dlprof.results.analysis import Throughput
from dlprof.results.report import Report
from dlprof.results.trials import BASIS_IN_EPOCH, CpuLevels, FaultLevels, TrialsResult, TunedRun
from dlprof.trace.build import TRAINING_OVER
from dlprof.trace.discover import load_run
from dlprof.workflows.analyze import analyze_run, build_report

#: The trace's step clock ends with the trials' last segment (num_workers=0) at step 534.
END = 534


def _extended(manifest: Manifest, steps: list[tuple[float, float]]) -> Manifest:
    clock = manifest.step_clock
    count = len(steps)
    more = {
        "phase": (PHASE_TUNED,) * count,
        "wall_ms": tuple(w for w, _ in steps),
        "cpu_ms": (1.0,) * count,
        "runq_ms": (0.0,) * count,
        "wait_ms": tuple(w for _, w in steps),
        "batches": (1,) * count,
        "epoch_start": (False,) * count,
        "fork_probe": (False,) * count,
    }
    columns = {name: getattr(clock, name) + column for name, column in more.items() if getattr(clock, name)}
    return dataclasses.replace(manifest, step_clock=dataclasses.replace(clock, **columns))


def _report(steps: list[tuple[float, float]], status: str = "complete") -> Report:
    """The trace's run gone on after its trials (--then best): five steps at the last segment's setting, then the
    switch to num_workers=2 with persistent workers (the recommended setting) at step 539."""
    run = load_run(DATA_DIR / "tiny_trials_trace.json")
    manifest = run.manifest
    assert len(manifest.step_clock) == END
    then = Then(
        mode="best", trials_end_step=END, num_workers=2, prefetch_factor=2, persistent_workers=True, first_step=539
    )
    manifest = _extended(manifest, steps)
    manifest = dataclasses.replace(manifest, status=status, trials=dataclasses.replace(manifest.trials, then=then))
    return Report(runs=[analyze_run(dataclasses.replace(run, manifest=manifest))])


#: Five steps at num_workers=0, the switch (the workers' first batch), then 199 steps of 25 ms.
AFTER = [(44.88, 20.0)] * 5 + [(300.0, 280.0)] + [(25.0, 0.1)] * 199


@pytest.fixture(scope="module")
def report() -> Report:
    return _report(AFTER)


def test_the_tuned_line_in_every_format(report):
    trials = report.runs[0].trials
    tuned = trials.tuned
    # 195 steady steps of 25 ms after the switch (its first batch and 4 more left out: forking), against the trial
    # of num_workers=2 (persistent) inside an epoch.
    assert tuned.speed.steps_per_s == pytest.approx(40.0) and tuned.speed.steps == 195
    trial = next(s for s in trials.settings if (s.num_workers, s.persistent_workers) == (2, True))
    assert tuned.trial_steps_per_s == trial.steps_per_s
    assert tuned.change_pct == pytest.approx(100 * (40.0 - trial.steps_per_s) / trial.steps_per_s)
    line = (
        "after the trials (--then best): trained on at num_workers=2 (persistent) from step 539 (200 steps): 40.00"
        f" steps/s (spread 0.0 %) against {trial.steps_per_s:.2f} in its trial ({tuned.change_pct:+.1f} %): held"
    )
    assert tuned_line(trials) == line
    assert f"\n  {line}\n" in renderer(Report, "text")(report)
    sentence = line[0].upper() + line[1:] + "."
    assert f"\n\n{sentence}\n" in renderer(Report, "markdown")(report)
    assert f'<p class="tuned">{sentence}</p>' in renderer(Report, "html")(report)
    document = json.loads(renderer(Report, "json")(report))
    assert document["trials"]["tuned"] == {
        "mode": "best",
        "num_workers": 2,
        "persistent_workers": True,
        "first_step": 539,
        "steps": 205,
        "steps_at_setting": 200,
        "steps_per_s": 40.0,
        "spread_pct": 0.0,
        "width_scaled_pct": None,  # the hand-written trace has no batch facts
        "steps_timed": 195,
        "trusted": True,
        "trial_steps_per_s": round(trial.steps_per_s, 3),
        "trial_persistent_workers": None,
        "change_pct": round(tuned.change_pct, 2),
        "held": True,
        "error": None,
        "page_faults": None,  # the trace's step clock kept no page faults
        # Its CPU time: 1 ms a step after the switch (hand-written), 21.92 in the trial.
        "cpu": {
            "cpu_ms_per_step": 1.0,
            "trial_cpu_ms_per_step": 21.92,
            "cores": 0.04,
            "trial_cores": 0.9,
            "cpu_per_step_moved": False,
        },
    }


def test_the_cost_of_tuning_says_what_the_switch_saved(report):
    trials = report.runs[0].trials
    own = next(s for s in trials.settings if (s.num_workers, s.persistent_workers) == (1, False))
    # The 200 steps after the switch at 40 steps/s against the run's own num_workers=1 inside an epoch.
    saved = 200 / own.steps_per_s - 200 / 40.0
    assert (trials.cost.tuned_steps, trials.cost.tuned_saved_s) == (200, pytest.approx(saved))
    text = renderer(Report, "text")(report)
    assert (
        f"; after the switch, num_workers=2 (persistent) saved {saved:.1f} s over the 200 steps it ran against your own"
        " setting (steady steps inside an epoch)\n" in text
    )
    document = json.loads(renderer(Report, "json")(report))
    assert document["trials"]["cost"]["tuned_steps"] == 200
    assert document["trials"]["cost"]["tuned_saved_s"] == pytest.approx(saved, abs=1e-3)


def test_a_run_still_training_is_reported_and_says_so():
    report = _report(AFTER[:8], status=STATUS_TRAINING)
    run = report.runs[0]
    assert run.info.training and not run.info.incomplete
    line = (
        "after the trials (--then best): trained on at num_workers=2 (persistent) from step 539 (3 steps): the"
        " training goes on; the rest is measured when it ends"
    )
    assert tuned_line(run.trials) == line
    note = status_note(run.info)
    assert note.startswith("the training goes on after the trials: this report covers the steps to their end")
    assert run.trials.cost.tuned_steps is None  # not measured yet: the cost per 1,000 steps
    text = renderer(Report, "text")(report)
    assert f"\nnote: {note}\n" in text and f"\n  {line}\n" in text
    assert "num_workers=2 saves" in text
    assert f"**Note:** {note}." in renderer(Report, "markdown")(report)
    assert f'<p class="note">Note: {note}.</p>' in renderer(Report, "html")(report)
    document = json.loads(renderer(Report, "json")(report))
    assert document["run"]["status"] == "training" and document["trials"]["tuned"]["held"] is None


def _trials(**fields) -> TrialsResult:
    tuned = TunedRun(
        mode="best",
        num_workers=2,
        persistent_workers=False,
        first_step=412,
        steps=1205,
        steps_at_setting=1200,
        speed=Throughput(steps_per_s=24.1, steps=1180, seconds=1180 / 24.1, spread_pct=1.5, trusted=True),
        trial_steps_per_s=24.6,
        change_pct=100 * (24.1 - 24.6) / 24.6,
        held=True,
    )
    return TrialsResult(
        rounds=1, rounds_planned=1, basis=BASIS_IN_EPOCH, settings=(), tuned=dataclasses.replace(tuned, **fields)
    )


def test_the_tuned_line_held_or_not_or_why_not():
    head = "after the trials (--then best): trained on at num_workers=2 from step 412 (1,200 steps): "
    assert tuned_line(_trials()) == head + "24.10 steps/s (spread 1.5 %) against 24.60 in its trial (-2.0 %): held"
    assert tuned_line(_trials(held=False)).endswith("(-2.0 %): did not hold")
    untried = _trials(trial_steps_per_s=None, change_pct=None, held=None, error="no trial of this count measured it")
    assert tuned_line(untried) == head + "24.10 steps/s (spread 1.5 %): no trial of this count measured it"
    short = _trials(speed=None, change_pct=None, held=None, error="15 steady steps in 0.39 s after the switch")
    assert tuned_line(short) == head.removesuffix(": ") + ": 15 steady steps in 0.39 s after the switch"
    none = _trials(num_workers=None, first_step=None, speed=None, held=None, error="no switch: the training ended")
    assert tuned_line(none) == "after the trials (--then best): no switch: the training ended"
    assert tuned_line(TrialsResult(rounds=1, rounds_planned=1, basis=BASIS_IN_EPOCH, settings=())) is None
    # Persistent workers the trials did not try, held against the same count's trial without them.
    other = _trials(persistent_workers=True, trial_persistent_workers=False)
    assert tuned_line(other) == (
        "after the trials (--then best): trained on at num_workers=2 (persistent) from step 412 (1,200 steps): 24.10"
        " steps/s (spread 1.5 %) against 24.60 in its count's trial without persistent workers (inside an epoch they"
        " change nothing) (-2.0 %): held"
    )


def test_the_tuned_line_says_where_malloc_moved():
    levels = FaultLevels(
        faults_per_step=7568.3, sys_ms=19.84, trial_faults_per_step=6916.9, trial_sys_ms=16.49, moved=True
    )
    line = tuned_line(_trials(held=False, fault_levels=levels))
    assert line.endswith(
        "(-2.0 %): did not hold; the main process's page faults moved, 7,568 a step after the switch against 6,917 in"
        " its trial (19.8 vs 16.5 ms of kernel time): glibc malloc's level, which moves a CPU training's speed at any"
        " setting"
    )
    steady = dataclasses.replace(levels, moved=False)
    assert tuned_line(_trials(fault_levels=steady)).endswith("(-2.0 %): held")  # the levels only in JSON


def test_the_tuned_line_says_where_the_cpu_per_step_moved():
    cpu = CpuLevels(cpu_ms=71.3, trial_cpu_ms=62.6, cores=1.98, trial_cores=1.97, cpu_per_step_moved=True)
    line = tuned_line(_trials(held=False, cpu_levels=cpu))
    assert line.endswith(
        "(-2.0 %): did not hold; the main process took 71.3 ms of CPU a step after the switch against 62.6 in its"
        " trial, with as many cores busy (1.98 vs 1.97): the same work took the training more CPU time, a move of its"
        " own speed, not the setting's"
    )
    assert tuned_line(_trials(cpu_levels=dataclasses.replace(cpu, cpu_per_step_moved=False))).endswith("(-2.0 %): held")


def _written_while_training(tmp_path) -> Path:
    """The trials' trace as written at their end (status ``training``, ``trials.then`` without a switch yet)."""
    document = json.loads((DATA_DIR / "tiny_trials_trace.json").read_text(encoding="utf-8"))
    document["dlprof"].update(manifest_version=7, status=STATUS_TRAINING)
    document["dlprof"]["trials"]["then"] = {"mode": "best", "trials_end_step": END}
    trace = tmp_path / "run" / "rank0.pt.trace.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps(document), encoding="utf-8")
    return trace


def test_analyze_reads_a_trace_written_while_the_training_goes_on(tmp_path):
    """The trace as written at the trials' end (status ``training``, ``trials.then`` without a switch yet), read from
    its file: analyzed, never refused."""
    trace = _written_while_training(tmp_path)
    # The recording that will replace it is open: its scratch folder, owned by a live process (this one).
    scratch = trace.parent / schema.SCRATCH_DIR
    scratch.mkdir()
    (scratch / schema.SCRATCH_OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    run = build_report(trace.parent).runs[0]
    assert run.info.training and run.manifest.trials.then == Then(mode="best", trials_end_step=END)
    assert tuned_line(run.trials) == (
        "after the trials (--then best): the training goes on; the rest is measured when it ends (no switch yet)"
    )
    assert run.advice.num_workers == 2  # the recommendation, from the trials


def test_a_trace_of_a_training_that_went_on_reads_as_partial_once_no_recording_is_open(tmp_path):
    """Its final write failed (a full disk: dlprof record removed its scratch folder), or dlprof record was killed
    (its scratch folder's owner is gone): the trials' traces stay, but the training goes on no more."""
    trace = _written_while_training(tmp_path)
    gone = build_report(trace.parent).runs[0]
    scratch = trace.parent / schema.SCRATCH_DIR
    scratch.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (scratch / schema.SCRATCH_OWNER_FILE).write_text(
        json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()})
    )
    killed = build_report(trace.parent).runs[0]
    for run in (gone, killed):
        assert not run.info.training and run.info.status == STATUS_PARTIAL and run.manifest.error == TRAINING_OVER
        assert tuned_line(run.trials) == (
            "after the trials (--then best): no step after the trials was recorded: this is the recording written"
            " when the trials ended (the one the training's end would have written was not: it was killed, or that"
            " write failed)"
        )
        assert run.advice.num_workers == 2  # the trials are analysed as any partial run's
