"""TensorBoard scalars of a run's in-process trials (dlprof.workflows.trials)."""

from __future__ import annotations

import shutil

import pytest
from conftest import DATA_DIR

from dlprof.results.analysis import Throughput
from dlprof.results.trials import BASIS_WHOLE_EPOCHS, TrialSetting, TrialsResult
from dlprof.workflows.analyze import build_report
from dlprof.workflows.trials import SCALARS_DIR, scalars, write_run_trial_scalars, write_trial_scalars


def trials() -> TrialsResult:
    runs = (
        TrialSetting(
            num_workers=2,
            persistent_workers=False,
            speed=Throughput(steps_per_s=40.0, steps=100, seconds=2.5, spread_pct=3.0),
            epoch_steps_per_s=30.0,
            restart_ms=300.0,
            segments=2,
            predicted_steps_per_s=32.0,
            error_pct=100 * (32 - 30) / 30,
        ),
        TrialSetting(
            num_workers=0,
            persistent_workers=False,
            speed=Throughput(steps_per_s=20.0, steps=100, seconds=5.0, spread_pct=1.0),
            epoch_steps_per_s=20.0,
            restart_ms=0.0,
            segments=2,
            predicted_steps_per_s=None,
            error_pct=None,
        ),
        TrialSetting(
            num_workers=2,
            persistent_workers=True,
            speed=Throughput(steps_per_s=40.0, steps=100, seconds=2.5, spread_pct=2.0),
            epoch_steps_per_s=39.0,
            restart_ms=25.0,
            segments=2,
            predicted_steps_per_s=41.0,
            error_pct=100 * (41 - 39) / 39,
            paced_steps_per_s=36.9,
            paced_error_pct=100 * (36.9 - 39) / 39,
        ),
    )
    return TrialsResult(rounds=2, rounds_planned=2, basis=BASIS_WHOLE_EPOCHS, settings=runs)


def test_one_point_per_setting_at_its_count_persistent_ones_under_their_own_tags():
    points = scalars(trials())
    assert [p for p in points if p[0] == "steps_per_s"] == [("steps_per_s", 20.0, 0), ("steps_per_s", 40.0, 2)]
    assert ("predicted_steps_per_s", 32.0, 2) in points and ("error_pct", pytest.approx(20 / 3), 2) in points
    assert not any(tag == "predicted_steps_per_s" and step == 0 for tag, _, step in points)  # unknown: left out
    assert [p for p in points if p[0].startswith("persistent_workers/")] == [
        ("persistent_workers/steps_per_s", 40.0, 2),
        ("persistent_workers/predicted_steps_per_s", 41.0, 2),
        ("persistent_workers/spread_pct", 2.0, 2),
        ("persistent_workers/epoch_steps_per_s", 39.0, 2),
        ("persistent_workers/restart_ms", 25.0, 2),
        ("persistent_workers/error_pct", pytest.approx(200 / 39), 2),
        ("persistent_workers/paced_steps_per_s", 36.9, 2),
        ("persistent_workers/paced_error_pct", pytest.approx(-210 / 39), 2),
    ]
    assert not any(tag == "paced_steps_per_s" for tag, _, _ in points)  # no pace set there: left out


def test_event_files_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    directory = write_trial_scalars(tmp_path / "scalars", trials())
    assert all(p.name.startswith("events.out.tfevents") for p in directory.iterdir())
    events = EventAccumulator(str(directory))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("steps_per_s")] == [(0, 20.0), (2, 40.0)]
    assert [(e.step, e.value) for e in events.Scalars("persistent_workers/epoch_steps_per_s")] == [(2, 39.0)]


def test_a_recorded_runs_trials_go_to_its_scalars_subfolder(tmp_path):
    pytest.importorskip("tensorboard")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(DATA_DIR / "tiny_trials_trace.json", run_dir / "host_1.1.pt.trace.json")
    directory = write_run_trial_scalars(run_dir)
    assert directory == run_dir / SCALARS_DIR and any(directory.iterdir())
    # Nothing but the trace at the top of the run directory, which still reads as one run.
    assert sorted(p.name for p in run_dir.iterdir() if p.is_file()) == ["host_1.1.pt.trace.json"]
    assert build_report(run_dir).runs[0].trials is not None
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", plain / "host_1.1.pt.trace.json")
    assert write_run_trial_scalars(plain) is None and not (plain / SCALARS_DIR).exists()
