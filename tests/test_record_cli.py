"""``dlprof record``'s closing lines, from a RecordResult (the record itself stubbed: see tests/capture/ for real
ones)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import invoke

from dlprof.analysis.unprofiled import reference_step_indices
from dlprof.capture import record as record_module
from dlprof.core import schema
from dlprof.core.manifest import MANIFEST_VERSION, Manifest, StepClock, Trials, TrialSegment
from dlprof.results.record import RecordResult
from dlprof.workflows.record import DEFAULT_ACTIVE


def _manifest(rank: int, after: int) -> Manifest:
    """Two profiled steps, then ``after`` unprofiled ones, in one epoch that started before the window."""
    n = 2 + after
    clock = StepClock(
        phase=("profiled",) * 2 + ("after",) * after,
        wall_ms=(10.0,) * n,
        cpu_ms=(5.0,) * n,
        runq_ms=(0.0,) * n,
        wait_ms=(1.0,) * n,
        batches=(1,) * n,
        epoch_start=(False,) * n,
        fork_probe=(False,) * n,
    )
    return Manifest(
        manifest_version=MANIFEST_VERSION,
        status=schema.STATUS_COMPLETE,
        rank=rank,
        step_clock=clock,
        stopped_early=True,
    )


def _recorded(monkeypatch, tmp_path, *manifests: Manifest):
    def fake_record(request, choose=None):
        run_dir = request.out_dir / request.name
        paths = tuple(run_dir / f"h_{m.rank}.1{schema.TRACE_SUFFIX}" for m in manifests)
        return RecordResult(
            run_dir=run_dir,
            trace_path=paths[0],
            status=schema.STATUS_COMPLETE,
            exit_code=0,
            error=None,
            steps_recorded=2,
            workers_seen=0,
            stopped_early=True,
            trace_paths=paths,
            manifests=manifests,
        )

    monkeypatch.setattr(record_module, "record", fake_record)
    return invoke("record", "--out", tmp_path, "--name", "r", "--reference-steps", "40", "--", "python", "train.py")


def test_the_stop_message_gives_the_reference_steps_timed(monkeypatch, tmp_path):
    manifest = _manifest(0, after=12)
    timed = len(reference_step_indices(manifest))
    assert timed == 12  # no loader (no queue), no epoch start, no fork probe: every unprofiled step counts
    result = _recorded(monkeypatch, tmp_path, manifest)
    assert result.exit_code == 0, result.output
    assert "stopped training after the window and 12 unprofiled reference steps;" in result.stdout
    assert "40 unprofiled" not in result.stdout  # what was asked for is not what was timed


@pytest.mark.parametrize(("afters", "said"), [((9, 9), "9"), ((7, 14), "7-14")])
def test_ranks_that_timed_different_counts_are_given_as_a_range(monkeypatch, tmp_path, afters, said):
    result = _recorded(monkeypatch, tmp_path, *(_manifest(rank, after) for rank, after in enumerate(afters)))
    assert result.exit_code == 0, result.output
    assert f"stopped training after the window and {said} unprofiled reference steps;" in result.stdout


def test_the_stop_message_says_that_trials_ran(monkeypatch, tmp_path):
    segments = tuple(
        TrialSegment(num_workers=n, persistent_workers=False, round=r, first_step=14 + 20 * i, steps=20)
        for i, (r, n) in enumerate([(0, 0), (0, 2), (1, 2), (1, 0)])
    )
    manifest = replace(
        _manifest(0, after=12), trials=Trials(counts=(0, 2), rounds=2, trial_steps=10, segments=segments)
    )
    result = _recorded(monkeypatch, tmp_path, manifest)
    assert result.exit_code == 0, result.output
    assert (
        "stopped training after the window and 12 unprofiled reference steps, then tried num_workers 0,2 in the"
        " training (4 segments in 2 rounds); add --run-to-end (without --try-workers) to let it train to its end"
    ) in result.stdout
    cut = replace(
        manifest,
        trials=Trials(counts=(0, 2), rounds=2, trial_steps=10, segments=segments[:1], incomplete="the training ended"),
    )
    result = _recorded(monkeypatch, tmp_path / "cut", cut)
    assert "(1 segment in 1 round)" in result.stdout
    assert "dlprof: the trials are incomplete: the training ended" in result.stderr


def test_then_with_the_built_in_workload_trains_its_steps_and_records_the_default_window(monkeypatch, tmp_path):
    """With --then, the built-in workload's --steps is the training's length: the window stays the default, the
    workload gets exactly those steps (no room added for dlprof to stop it), and dlprof follows the trials' plan."""
    asked = []

    def fake_record(request, choose=None):
        asked.append((request, choose))
        raise SystemExit(0)

    monkeypatch.setattr(record_module, "record", fake_record)
    result = invoke("record", "--out", tmp_path, "--try-workers", "0,2", "--then", "best", "--steps", "3000")
    assert result.exit_code == 0, result.output
    ((request, choose),) = asked
    assert request.active == DEFAULT_ACTIVE and not request.run_to_end and request.trials.then == "best"
    assert request.command[request.command.index("--steps") + 1] == "3000" and choose is not None
