"""The report's DataFrames (dlprof.report.frames, through ``dlprof.analyze``) against the JSON report of the same run:
the same rows and the same numbers, NaN where the JSON has null; the report shown in Jupyter; the callback's
headline."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
import sys
from html import escape

import pandas as pd
import pytest
from conftest import DATA_DIR
from many_ranks import replicate_tiny, uniform_job

import dlprof
from dlprof.notebook import NotebookReport
from dlprof.report import json_report
from dlprof.report.format import rounded
from dlprof.results.analysis import CATEGORIES
from dlprof.workflows.analyze import build_report


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, NotebookReport]:
    tmp = tmp_path_factory.mktemp("frames")
    runs = tmp / "runs"
    for name in ("tiny_dlprof_trace.json", "tiny_trials_trace.json"):
        (runs / name.split("_trace")[0]).mkdir(parents=True)
        shutil.copy(DATA_DIR / name, runs / name.split("_trace")[0] / name)
    return {
        "tiny": dlprof.analyze(DATA_DIR / "tiny_dlprof_trace.json"),
        "trials": dlprof.analyze(DATA_DIR / "tiny_trials_trace.json"),
        "ranks2": dlprof.analyze(DATA_DIR / "ranks"),
        "tiny20": dlprof.analyze(replicate_tiny(tmp / "tiny20", 20, 8)),
        "job20": dlprof.analyze(uniform_job(tmp / "job20", 20, 8)),
        "two runs": dlprof.analyze(runs),
    }


def _run_documents(report: NotebookReport) -> list[dict]:
    document = json.loads(json_report.render(report))
    return document.get("runs", [document])


def _same(value: object, expected: object, digits: int = 3) -> bool:
    """A frame's cell is the JSON's value: NaN (or <NA>) for null, numbers as the JSON rounds them."""
    if expected is None:
        return bool(pd.isna(value))
    if isinstance(expected, (bool, str)):
        return bool(value == expected)
    if isinstance(expected, int) and not isinstance(value, float):
        return int(value) == expected
    return rounded(float(value), digits) == expected


def _assert_rows(
    frame: pd.DataFrame, rows: list[dict], columns: dict[str, str], digits: dict[str, int] | None = None
) -> None:
    """``frame``'s rows are ``rows`` one by one: frame column -> JSON key."""
    assert len(frame) == len(rows)
    for column, key in columns.items():
        for i, (value, row) in enumerate(zip(frame[column], rows)):
            assert _same(value, row[key], (digits or {}).get(key, 3)), f"row {i}, {column}: {value!r} != {row[key]!r}"


@pytest.mark.parametrize("name", ["tiny", "trials", "ranks2", "tiny20", "job20", "two runs"])
def test_every_frame_holds_the_json_reports_numbers(reports, name):
    report = reports[name]
    documents = _run_documents(report)
    frames = {"steps": report.steps, "batches": report.batches, "predictions": report.predictions}
    frames |= {"trials": report.trials, "ranks": report.ranks}
    for frame in frames.values():
        assert list(frame["run"].unique()) == [r.info.name for r in report.runs if (frame["run"] == r.info.name).any()]
    for run, document in zip(report.runs, documents):
        mine = {kind: frame[frame["run"] == run.info.name] for kind, frame in frames.items()}

        per_step = document["steps"]["per_step"]
        columns = {"step": "step", "step_ms": "step_ms"} | {f"{c}_ms": f"{c}_ms" for c in CATEGORIES}
        _assert_rows(mine["steps"], per_step, columns)
        assert len(per_step) == document["steps"]["count"]

        loader, batches = document["loader"], mine["batches"]
        if loader is None:
            assert batches.empty
        else:
            assert len(batches) == loader["batches"]
            for column in ("batch_ms", "batch_cpu_ms", "batch_runq_ms", "fetch_ms", "tokenize_ms", "collate_ms"):
                assert batches[column].mean() == pytest.approx(loader[column], abs=6e-4), column
            for column in ("fetch_cpu_ms", "tokenize_cpu_ms", "collate_cpu_ms"):
                assert batches[column].mean() == pytest.approx(loader[column], abs=6e-4), column
            counts = batches.groupby("worker").size().to_dict()
            assert counts == {w["worker"]: w["batches"] for w in loader["workers"]}

        predicted = document["recommendation"]["predicted"]
        _assert_rows(
            mine["predictions"],
            predicted,
            {k: k for k in ("num_workers", "step_ms", "steps_per_s", "bound", "epoch_steps_per_s", "restart_ms")},
        )
        chosen = mine["predictions"][mine["predictions"]["recommended"]]["num_workers"].tolist()
        assert chosen == [p["num_workers"] for p in predicted if p["num_workers"] == run.advice.num_workers]

        trials = document["trials"]
        if trials is None:
            assert mine["trials"].empty
        else:
            _assert_trial_segments(mine["trials"], trials, run.manifest)

        ranks = document["ranks"]
        if ranks is None:
            assert mine["ranks"].empty
        else:
            keys = list(ranks["ranks"][0])
            _assert_rows(mine["ranks"], ranks["ranks"], {k: k for k in keys}, {"data_wait_pct": 2})
            assert mine["ranks"][mine["ranks"]["slowest"]]["rank"].tolist() == [ranks["slowest_rank"]]


def _assert_trial_segments(segments: pd.DataFrame, trials: dict, manifest) -> None:
    """Every segment of the manifest, once; each setting's segments add up to the setting the JSON reports."""
    assert len(segments) == len(manifest.trials.segments)
    assert segments["first_step"].tolist() == [s.first_step for s in manifest.trials.segments]
    for setting in trials["runs"]:
        mine = segments[
            (segments["num_workers"] == setting["num_workers"])
            & (segments["persistent_workers"] == setting["persistent_workers"])
            & ~segments["trim_padding"]  # the padding segment is measured apart
        ]
        assert len(mine) == setting["segments"]
        # A setting's workers' memory is the most its segments' workers took together.
        known = mine["workers_pss_mib"].dropna()
        assert _same(known.max() if len(known) else None, setting["workers_pss_mib"])
        timed = mine.dropna(subset=["steps_per_s"])
        assert int(timed["steps_timed"].sum()) == setting["steps_timed"]
        if timed.empty:
            assert setting["steps_per_s"] is None
            continue
        # A setting's speed is all its segments' steady steps over all their time (dlprof.core.throughput.combine).
        steps = timed["steps_timed"].sum() - timed["surplus_steps"].sum()
        assert _same(steps / timed["seconds"].sum(), setting["steps_per_s"])


def test_unknown_is_nan_never_zero(reports):
    """A job recorded without dlprof's spans: its loader's batch time and its workers' memory are unknown."""
    ranks = reports["job20"].ranks
    assert len(ranks) == 20 and ranks["loader_batch_ms"].isna().all() and ranks["worker_pss_mib"].isna().all()
    assert ranks["loader_batch_ms"].dtype == "float64"
    assert reports["job20"].batches.empty and list(reports["job20"].batches.columns)[:3] == ["run", "worker", "pid"]
    tiny = reports["tiny"]
    assert tiny.ranks.empty and tiny.trials.empty
    trials = reports["trials"].trials
    assert not trials.empty and trials["steps_timed"].dtype == "Int64"


def test_the_report_of_several_runs_gives_one_frame_with_a_run_column(reports):
    report = reports["two runs"]
    names = [r.info.name for r in report.runs]
    assert sorted(names) == ["tiny_dlprof", "tiny_trials"]
    assert set(report.steps["run"]) == set(names)
    assert len(report.steps) == sum(len(r.steps.steps) for r in report.runs)
    assert set(report.trials["run"]) == {"tiny_trials"}


def test_the_report_stays_a_report(reports):
    report = reports["tiny"]
    assert report.runs[0].info.name == "tiny_dlprof_trace.json"
    assert json_report.render(report) == json_report.render(dlprof.analyze(DATA_DIR / "tiny_dlprof_trace.json"))
    plain = build_report(DATA_DIR / "tiny_dlprof_trace.json")
    assert type(plain) is not NotebookReport and plain == report and report == plain  # equal whichever side
    assert report != dataclasses.replace(plain, skipped=[*plain.skipped, plain.runs[0]])


@pytest.mark.parametrize("name", ["tiny", "trials", "tiny20", "two runs"])
def test_jupyter_shows_the_html_reports_body_with_its_headline(reports, name):
    report = reports[name]
    shown = report._repr_html_()
    assert shown.startswith('<div class="dlprof-report">') and "<html" not in shown and "<body" not in shown
    for run in report.runs:
        assert run.advice.headline is not None and escape(run.advice.headline.text) in shown
    assert "body {" not in shown and ":root" not in shown  # the notebook's own page keeps its style


def test_pandas_stays_out_of_dlprof_analyze():
    code = (
        "import sys; from dlprof.cli import main\n"
        f"sys.argv = ['dlprof', 'analyze', {str(DATA_DIR / 'tiny_dlprof_trace.json')!r}]\n"
        "try:\n    main()\nexcept SystemExit as end:\n    assert not end.code, end.code\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "num_workers" in done.stdout, done.stderr


def test_the_callback_prints_the_headline_of_the_run_it_recorded(tmp_path):
    from dlprof.integrations.transformers import headline_message

    run_dir = tmp_path / "hf"
    run_dir.mkdir()
    shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", run_dir / "host_1.1700000000000.pt.trace.json")
    headline = dlprof.analyze(run_dir).runs[0].advice.headline
    assert headline is not None and headline_message(run_dir) == f"dlprof: {headline.text}"
    empty = tmp_path / "empty"
    empty.mkdir()
    message = headline_message(empty)
    assert message.startswith("dlprof: no headline: ") and "\n" not in message


def test_values_are_unrounded(reports):
    """The frames carry the Report's numbers; rounding is the JSON's."""
    run = reports["trials"].runs[0]
    assert reports["trials"].predictions["step_ms"].tolist()[2] == run.advice.predicted[2].step_ms
    assert not math.isnan(reports["trials"].trials["steps_per_s"].iloc[0])


def test_findings_frame_holds_the_json_reports_findings(reports):
    from report.findings_example import FINDINGS, with_findings

    none = with_findings(reports["tiny"], ()).findings
    assert none.empty and list(none.columns)[:2] == ["run", "id"]
    report = with_findings(reports["two runs"])
    assert isinstance(report, NotebookReport)
    frame = report.findings
    assert len(frame) == len(FINDINGS) * len(report.runs)
    for run, document in zip(report.runs, _run_documents(report)):
        mine = frame[frame["run"] == run.info.name]
        keys = ("id", "severity", "title", "evidence", "fix", "gain_pct", "gain_basis")
        _assert_rows(mine, document["findings"], {k: k for k in keys}, {"gain_pct": 2})
    assert frame["gain_pct"].dtype == "float64" and frame["gain_pct"].isna().sum() == len(report.runs)
    assert frame["gain_pct"].tolist()[:3] == [f.gain_pct for f in FINDINGS[:3]]  # unrounded
