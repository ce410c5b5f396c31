"""The headline every report leads with (dlprof.advice.headline): exact text on hand-built advice for each case, the
JSON object, and the reports of analyze and sweep leading with it (diff: tests/test_diff_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA_DIR

from dlprof.advice.headline import headline
from dlprof.advice.rules import CHOOSE_WITHIN
from dlprof.report import render, renderer
from dlprof.report.json_report import headline_document
from dlprof.results.advice import (
    HEADLINE_CHANGE,
    HEADLINE_KEEP,
    HEADLINE_NONE,
    RESTS_ON_MEASURED,
    RESTS_ON_PREDICTED,
    Advice,
    Headline,
    Prediction,
)
from dlprof.results.analysis import Throughput
from dlprof.results.findings import (
    FINDING_PADDING,
    FINDING_PRETOKENIZE,
    FINDING_THREADS,
    FINDING_UNSHARDED_ITERABLE,
    GAIN_NONE,
    GAIN_PREDICTED,
    GAIN_UP_TO,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
    Finding,
)
from dlprof.results.report import Report, RunInfo
from dlprof.results.sweep import SweepPoint
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, TrialSetting, TrialsResult
from dlprof.workflows.analyze import build_report
from dlprof.workflows.sweep import judge


def info(num_workers: int | None = 2, *, persistent: bool | None = False, pin: bool | None = False) -> RunInfo:
    return RunInfo(
        name="run",
        trace_file="run/trace.json",
        status="complete",
        device="cpu",
        num_workers=num_workers,
        batch_size=4,
        pin_memory=pin,
        prefetch_factor=2,
        persistent_workers=persistent,
        usable_cores=4,
        ram_total_mib=16000,
        gpu_name=None,
        torch_version=None,
        steps_recorded=20,
        batches_per_step=1.0,
        has_worker_spans=True,
    )


def predicted(n: int, steps_per_s: float, bound: str = "consumer", epoch: float | None = None, restart_ms: float = 0.0):
    return Prediction(
        num_workers=n,
        step_ms=1000 / steps_per_s,
        steps_per_s=steps_per_s,
        bound=bound,
        epoch_steps_per_s=epoch,
        restart_ms=restart_ms,
    )


def advice(num_workers: int | None, predictions: list[Prediction], **changes) -> Advice:
    basis = BASIS_WHOLE_EPOCHS if predictions and predictions[0].epoch_steps_per_s else BASIS_IN_EPOCH
    fields = {"pin_memory": None, "prefetch_factor": None, "persistent_workers": None, "bound": None}
    fields.update({"compared_on": basis, **changes})
    return Advice(verdict="NOT", num_workers=num_workers, predicted=predictions, evidence=[], **fields)


def test_fewer_workers_over_whole_epochs_name_the_restart_they_save():
    predictions = [
        predicted(0, 21.8, "main process", epoch=21.8),
        predicted(1, 22.0, epoch=17.5, restart_ms=700),
        predicted(2, 22.5, epoch=16.0, restart_ms=849),
    ]
    line = headline(advice(0, predictions, bound="worker restarts"), info(2))
    assert line == Headline(
        text=(
            "num_workers 2 -> 0: 36 % faster over whole epochs (predicted 21.8 vs 16.0 steps/s; workers restart at"
            " every epoch, 849 ms each)"
        ),
        change="num_workers 2 -> 0",
        gain_pct=pytest.approx(100 * (21.8 / 16.0 - 1)),
        basis=RESTS_ON_PREDICTED,
        kind=HEADLINE_CHANGE,
        reason="workers restart at every epoch, 849 ms each",
    )


def test_fewer_workers_faster_inside_an_epoch_and_over_epochs_name_both_reasons():
    """The built-in workload at 2 workers: 0 workers is 3 % faster inside an epoch (beyond the 2 % rule) and 16 % over
    whole epochs, most of it the restarts: the line names both."""
    predictions = [predicted(0, 15.3, "main process", epoch=15.3), predicted(2, 14.8, epoch=13.2, restart_ms=457)]
    line = headline(advice(0, predictions, bound="main process"), info(2))
    assert line.text == (
        "num_workers 2 -> 0: 16 % faster over whole epochs (predicted 15.3 vs 13.2 steps/s; the 2 workers cost the main"
        " process more than they supply, and restart at every epoch, 457 ms each)"
    )
    slower_inside = [predicted(0, 14.0, "main process", epoch=14.0), predicted(2, 14.8, epoch=12.0, restart_ms=900)]
    assert headline(advice(0, slower_inside, bound="main process"), info(2)).reason == (
        "workers restart at every epoch, 900 ms each"
    )


def test_more_workers_inside_an_epoch_name_what_binds_at_the_recorded_count():
    predictions = [predicted(0, 10.0, "main process"), predicted(1, 12.0, "loader"), predicted(2, 20.0)]
    line = headline(advice(2, predictions), info(1))
    assert line.text == (
        "num_workers 1 -> 2: 67 % faster inside an epoch (predicted 20.0 vs 12.0 steps/s; loading binds at 1 worker)"
    )
    assert (line.change, line.basis, line.kind) == ("num_workers 1 -> 2", RESTS_ON_PREDICTED, HEADLINE_CHANGE)
    from_zero = headline(advice(2, predictions), info(0))
    assert from_zero.text == (
        "num_workers 0 -> 2: 100 % faster inside an epoch (predicted 20.0 vs 10.0 steps/s; the main process loads every"
        " batch itself)"
    )


def test_a_measured_recommendation_says_so_with_the_measured_speeds():
    def tried(n: int, persistent: bool, in_epoch: float, over_epochs: float, restart_ms: float) -> TrialSetting:
        return TrialSetting(
            num_workers=n,
            persistent_workers=persistent,
            speed=Throughput(steps_per_s=in_epoch, steps=100, seconds=100 / in_epoch, spread_pct=2.0),
            epoch_steps_per_s=over_epochs,
            restart_ms=restart_ms,
            segments=2,
            predicted_steps_per_s=None,
            error_pct=None,
        )

    trials = TrialsResult(
        rounds=2,
        rounds_planned=2,
        basis=BASIS_WHOLE_EPOCHS,
        settings=(tried(1, False, 20.0, 15.0, 900), tried(2, False, 30.0, 24.0, 950), tried(2, True, 30.5, 30.0, 40)),
    )
    predictions = [predicted(n, 10.0 * (n + 1), "loader", epoch=9.0 * (n + 1), restart_ms=900) for n in range(4)]
    chosen = advice(2, predictions, persistent_workers=True, rests_on=RESTS_ON_MEASURED, bound="consumer")
    line = headline(chosen, info(1), trials)
    assert line.text == (
        "num_workers 1 -> 2, persistent_workers False -> True: 100 % faster over whole epochs (measured in this"
        " training: 30.0 vs 15.0 steps/s; loading binds at 1 worker)"
    )
    assert (line.gain_pct, line.basis) == (pytest.approx(100.0), RESTS_ON_MEASURED)
    # The recorded count kept, its workers kept alive: the restart measured at it is the reason.
    kept = headline(advice(1, predictions, persistent_workers=True, rests_on=RESTS_ON_MEASURED), info(1), trials)
    assert (
        kept.change == "persistent_workers False -> True"
        and kept.reason == "workers restart at every epoch, 900 ms each"
    )


def test_keep_your_settings_just_under_the_line_and_a_change_just_over_it():
    assert CHOOSE_WITHIN == 0.02  # the headline names the rule's own figure
    under = [predicted(1, 15.0, "loader"), predicted(2, 20.0, "loader"), predicted(3, 20.0 * 1.019)]
    line = headline(advice(2, under), info(2))
    assert line == Headline(
        text="keep your settings: no setting is predicted more than 2 % faster",
        change=None,
        gain_pct=None,
        basis=RESTS_ON_PREDICTED,
        kind=HEADLINE_KEEP,
    )
    over = [predicted(1, 15.0, "loader"), predicted(2, 20.0, "loader"), predicted(3, 20.0 * 1.022)]
    line = headline(advice(3, over), info(2))
    assert line.text == (
        "num_workers 2 -> 3: 2.2 % faster inside an epoch (predicted 20.4 vs 20.0 steps/s; loading binds at 2 workers)"
    )
    assert line.gain_pct == pytest.approx(2.2)
    # Just over the line, but kept by a limit: the headline says what rules the faster setting out.
    limited = headline(advice(2, over, bound="memory"), info(2))
    assert (
        limited.text
        == "keep your settings: num_workers=3 is predicted 2.2 % faster, but more workers would not fit in memory"
    )
    assert limited.kind == HEADLINE_KEEP and limited.change is None


def test_keep_on_measurement_says_measured():
    line = headline(advice(2, [predicted(2, 20.0)], rests_on=RESTS_ON_MEASURED), info(2))
    assert line.text == "keep your settings: no setting is more than 2 % faster (measured in this training)"
    assert line.basis == RESTS_ON_MEASURED


def test_fewer_workers_as_fast_and_fewer_workers_faster_inside_an_epoch():
    predictions = [predicted(0, 12.0, "main process"), predicted(2, 20.0), predicted(4, 20.1)]
    line = headline(advice(2, predictions), info(4))
    assert line.text == (
        "num_workers 4 -> 2: as fast inside an epoch with 2 fewer workers (predicted 20.0 vs 20.1 steps/s; the 2 extra"
        " workers buy nothing)"
    )
    assert line.gain_pct == pytest.approx(-0.4975, abs=1e-3)
    faster = [predicted(0, 30.0, "main process"), predicted(2, 20.0)]
    assert headline(advice(0, faster), info(2)).text == (
        "num_workers 2 -> 0: 50 % faster inside an epoch (predicted 30.0 vs 20.0 steps/s; the 2 workers cost the main"
        " process more than they supply)"
    )


def test_settings_the_model_does_not_predict_and_no_recommendation():
    line = headline(advice(2, [predicted(2, 20.0)], pin_memory=False), info(2, pin=True))
    assert line.text == "pin_memory True -> False: no speed predicted (pin_memory does nothing without a GPU)"
    assert (line.change, line.gain_pct, line.basis) == ("pin_memory True -> False", None, None)
    none = headline(advice(None, [], compared_on=None), info(2))
    assert none.kind == HEADLINE_NONE and none.change is None and none.basis is None
    assert none.text.startswith("no num_workers recommendation: what a batch costs to produce is unknown")
    unknown = headline(advice(1, [predicted(0, 10.0), predicted(1, 20.0)]), info(None, persistent=None))
    assert unknown.text == "num_workers unknown -> 1: 20.0 steps/s inside an epoch (predicted)"
    assert unknown.gain_pct is None


def test_json_headline_object():
    line = Headline(text="t", change="num_workers 2 -> 0", gain_pct=36.2512, basis=RESTS_ON_PREDICTED)
    assert headline_document(line) == {
        "text": "t",
        "change": "num_workers 2 -> 0",
        "gain_pct": 36.25,
        "basis": "predicted",
    }
    assert headline_document(None) is None


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report(DATA_DIR / "tiny_trials_trace.json")


def test_every_format_of_analyze_leads_with_the_headline(report):
    text = report.runs[0].advice.headline.text
    assert text.startswith("num_workers 1 -> 2, persistent_workers False -> True: ")
    assert renderer(Report, "text")(report).splitlines()[:2] == [
        text,
        "  HIGHLY input-bound: waiting for data 8.00 ms of a 36.00 ms step (22.2 %)",
    ]
    assert renderer(Report, "markdown")(report).splitlines()[0] == f"**{text}**"
    html = renderer(Report, "html")(report)
    assert html.index(text.replace(">", "&gt;")) < html.index("input-bound: waiting for data")
    document = json.loads(renderer(Report, "json")(report))
    assert list(document)[:3] == ["schema", "dlprof_version", "headline"]
    assert document["headline"] == {
        "text": text,
        "change": "num_workers 1 -> 2, persistent_workers False -> True",
        "gain_pct": round(report.runs[0].advice.headline.gain_pct, 2),
        "basis": "measured",
    }


def point(n: int, steps_per_s: float) -> SweepPoint:
    return SweepPoint(
        num_workers=n,
        run_dir=Path(f"sw/{n}"),
        trace_file=Path(f"sw/{n}/t.json"),
        steps_per_s=steps_per_s,
        unprofiled=True,
        over_epochs=False,
        data_wait_pct=5.0,
        worker_pss_mib=None,
        predicted_steps_per_s=None,
        error_pct=None,
        num_workers_recorded=n,
        profiler_overhead_pct=None,
    )


def test_sweep_leads_with_the_measured_headline():
    result = judge("sw", Path("sw"), [point(2, 16.0), point(0, 21.8), point(4, 21.5)], 0, None)
    assert (
        result.headline.text
        == "num_workers 2 -> 0: 36 % faster inside an epoch (measured in this sweep: 21.8 vs 16.0 steps/s)"
    )
    assert result.headline.basis == RESTS_ON_MEASURED
    for fmt in ("text", "markdown"):
        assert result.headline.text in render(result, fmt).splitlines()[0]
    document = json.loads(render(result, "json"))
    assert document["headline"]["change"] == "num_workers 2 -> 0" and "dlprof_version" in document
    html = render(result, "html")
    assert html.index("num_workers 2 -&gt; 0: 36 % faster") < html.index("dlprof recommended num_workers=0")
    kept = judge("sw", Path("sw"), [point(2, 20.0), point(4, 20.3)], 2, None)
    assert kept.headline.text == (
        "keep num_workers=2: no other count is more than 2 % faster (measured in this sweep: 20.0 steps/s inside an"
        " epoch)"
    )


def finding(gain_pct: float | None, basis: str, **changes) -> Finding:
    fields = {"id": FINDING_PRETOKENIZE, "severity": SEVERITY_WARNING, "evidence": "e", "fix": "f"}
    fields |= {"title": "pre-tokenize the dataset", "reason": "the tokenizer takes 70 % of a batch's time"}
    return Finding(**{**fields, "gain_pct": gain_pct, "gain_basis": basis, **changes})


def test_a_finding_that_buys_more_than_the_settings_leads_the_headline():
    predictions = [predicted(0, 10.0, "main process"), predicted(1, 12.0, "loader"), predicted(2, 20.0)]
    settings = headline(advice(2, predictions), info(1))
    assert settings.gain_pct == pytest.approx(100 * (20 / 12 - 1))
    line = headline(advice(2, predictions, findings=(finding(80.0, GAIN_PREDICTED),)), info(1))
    assert line == Headline(
        text=(
            "pre-tokenize the dataset: 80 % faster (predicted; the tokenizer takes 70 % of a batch's time); also"
            f" {settings.text}"
        ),
        change="pre-tokenize the dataset",
        gain_pct=80.0,
        basis=GAIN_PREDICTED,
        kind=HEADLINE_CHANGE,
        reason="the tokenizer takes 70 % of a batch's time",
    )
    # A smaller gain leaves the settings' line as it is.
    assert headline(advice(2, predictions, findings=(finding(60.0, GAIN_PREDICTED),)), info(1)) == settings


def test_the_padding_bound_leads_a_keep_headline_and_other_bounds_do_not():
    predictions = [predicted(0, 10.0, "main process"), predicted(2, 10.1)]
    keep = headline(advice(2, predictions), info(2))
    assert keep.kind == HEADLINE_KEEP
    padding = finding(
        31.4,
        GAIN_UP_TO,
        id=FINDING_PADDING,
        title="pad to the longest sequence",
        reason="62 % of the tokens are padding",
    )
    threads = finding(40.0, GAIN_UP_TO, id=FINDING_THREADS, title="threads", reason="waits")
    line = headline(advice(2, predictions, findings=(threads, padding)), info(2))
    # No "also": keeping the settings is no change to add.
    assert line.text == (
        "pad to the longest sequence: up to 31 % faster (a bound from the tokens; 62 % of the tokens are padding)"
    )
    assert (line.change, line.gain_pct, line.basis, line.kind) == (
        "pad to the longest sequence",
        31.4,
        GAIN_UP_TO,
        HEADLINE_CHANGE,
    )
    assert headline(advice(2, predictions, findings=(threads,)), info(2)) == keep


def test_an_error_finding_leads_the_headline_before_any_speed():
    """Samples repeated by every worker (or batches that cannot fit in /dev/shm) come first, whatever the gains."""
    predictions = [predicted(0, 10.0, "main process"), predicted(2, 10.1)]
    padding = finding(31.4, GAIN_UP_TO, id=FINDING_PADDING, title="pad to the longest sequence", reason="62 %")
    error = finding(
        None,
        GAIN_NONE,
        id=FINDING_UNSHARDED_ITERABLE,
        severity=SEVERITY_ERROR,
        title="shard the iterable dataset across workers",
        reason="50 % of the batches repeat another worker's",
    )
    line = headline(advice(2, predictions, findings=(padding, error)), info(2))
    assert line.text == "shard the iterable dataset across workers (50 % of the batches repeat another worker's)"
    assert (line.change, line.gain_pct, line.basis, line.kind) == (
        "shard the iterable dataset across workers",
        None,
        None,
        HEADLINE_CHANGE,
    )
    settings = headline(advice(0, predictions), info(2))
    assert settings.kind == HEADLINE_CHANGE
    after = headline(advice(0, predictions, findings=(error,)), info(2))
    assert (
        after.text
        == "shard the iterable dataset across workers (50 % of the batches repeat another worker's); also "
        + settings.text
    )
