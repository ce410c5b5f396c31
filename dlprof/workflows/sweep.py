"""``dlprof sweep``: measure the training at several ``num_workers`` and check dlprof's advice by measurement.

Two modes (:attr:`~dlprof.results.sweep.SweepResult.mode`):

* **In-process** (the default, ``RecordRequest.trials`` set): one launch, recorded into ``<out>/<sweep>/`` at the
  first count (imposed on every DataLoader the script creates), whose in-process trials then train on at every count
  in turn, interleaved in rounds (:mod:`dlprof.analysis.trials`). One model load, and no launch-to-launch speed
  modes between the counts compared.
* **Launches** (``--launches``): for each count, in the order given, a normal run recorded under
  ``<out>/<sweep>/<count>/``, analysed like ``dlprof analyze`` does. How the model is checked across processes.

Either way the first count's profiled window makes the advice that is checked: the throughput model's own
recommendation (:attr:`~dlprof.results.advice.Advice.model_num_workers`, the trials left out), its predictions set
against what every count measured. It held when measured within :data:`~dlprof.advice.rules.WITHIN_BEST` of the best,
with no more workers than the fewest measured within :data:`~dlprof.advice.rules.CHOOSE_WITHIN` of it (the rule the
recommendation follows), or did not.

Measured speed is the unprofiled speed: the trials' steady steps, or the steady reference steps after each run's
profiler window (steps over time, each pause's refill transient left out, :mod:`~dlprof.core.throughput`),
because that is what the user's training gets and what the predictions are calibrated to; a launch without enough
reference steps falls back to its profiled steps and says so. Every count of a sweep is measured, and predicted, on one
basis: over whole epochs when every count and every prediction knows that speed, else inside an epoch.

The renderers in :mod:`dlprof.report.sweep` format the :class:`~dlprof.results.sweep.SweepResult`; they never
compute.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from dlprof.advice.headline import IN_THIS_SWEEP, IN_THIS_TRAINING, measured_headline
from dlprof.advice.rules import CHOOSE_WITHIN, WITHIN_BEST, close_enough
from dlprof.analysis.unprofiled import distrust
from dlprof.capture.child import child_argv
from dlprof.capture.record import record
from dlprof.core import schema
from dlprof.core.errors import DlprofError, RecordError, UsageError
from dlprof.core.manifest import Schedule
from dlprof.results.record import RecordRequest
from dlprof.results.report import RunReport
from dlprof.results.sweep import (
    MODE_LAUNCHES,
    OUTCOME_HELD,
    OUTCOME_MORE_WORKERS,
    OUTCOME_NO_RECOMMENDATION,
    OUTCOME_NOT_MEASURED,
    OUTCOME_SLOWER,
    SweepPoint,
    SweepResult,
)
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, MODE_IN_PROCESS, TrialSetting, TrialsResult
from dlprof.workflows.analyze import build_report

#: Sub-directory of the sweep directory holding TensorBoard scalars (global_step = num_workers).
SCALARS_DIR = "scalars"
#: TensorBoard scalar tags.
TAG_STEPS_PER_S = "steps_per_s"
TAG_DATA_WAIT_PCT = "data_wait_pct"
TAG_PREDICTED_STEPS_PER_S = "predicted_steps_per_s"
#: Fewer counts than this compare nothing.
MIN_COUNTS = 2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_counts(counts: Sequence[int]) -> tuple[int, ...]:
    """The counts to sweep, checked: non-negative, distinct, at least :data:`MIN_COUNTS`.

    Raises:
        UsageError: a count is negative or repeated, or fewer than two were given.
    """
    counts = tuple(counts)
    for n in counts:
        if n < 0:
            raise UsageError(
                f"--workers: num_workers={n} is negative; give counts of 0 or more, e.g. --workers 0,1,2,4"
            )
    seen: set[int] = set()
    for n in counts:
        if n in seen:
            raise UsageError(f"--workers: num_workers={n} appears twice; give each count once, e.g. --workers 0,1,2,4")
        seen.add(n)
    if len(counts) < MIN_COUNTS:
        raise UsageError(f"--workers: give at least {MIN_COUNTS} different counts to compare, e.g. --workers 0,1,2,4")
    return counts


def basis(reports: Sequence[RunReport], counts: Sequence[int]) -> str:
    """The one basis every run of a sweep is measured and predicted on: over whole epochs (worker restarts included)
    when every run measured its speed over whole epochs and every prediction of the first run (``reports[0]``) for
    a swept count knows it too; else inside an epoch, every one of them."""
    first = {p.num_workers: p for p in reports[0].advice.predicted}
    measured = all(r.unprofiled is not None and r.unprofiled.epoch_steps_per_s is not None for r in reports)
    predicted = all(first[n].epoch_steps_per_s is not None for n in counts if n in first)
    return BASIS_WHOLE_EPOCHS if measured and predicted else BASIS_IN_EPOCH


def measure(run: RunReport, num_workers: int, run_dir: Path, first: RunReport, over_epochs: bool = False) -> SweepPoint:
    """What one swept run measured, and what ``first`` (the run whose advice is checked) predicted for it: over whole
    epochs when ``over_epochs`` (the sweep's :func:`basis`), else inside an epoch."""
    unprofiled = run.unprofiled
    prediction = next((p for p in first.advice.predicted if p.num_workers == num_workers), None)
    spread, distrust = None, None
    if unprofiled is not None:
        # The steady reference steps' speed (steps over time, each pause's transient left out), or whole epochs'.
        steps_per_s = unprofiled.epoch_steps_per_s if over_epochs else unprofiled.steps_per_s
        assert steps_per_s is not None  # over whole epochs only where every run measured them (basis)
        data_wait_pct = 100 * unprofiled.wait_ms / unprofiled.step_ms
        overhead = unprofiled.overhead_pct
        whole = unprofiled.epoch.whole_epoch_speed if unprofiled.epoch is not None else None
        if not over_epochs and unprofiled.speed is not None:
            spread, distrust = unprofiled.speed.spread_pct, unprofiled.distrust
        elif over_epochs and whole is not None:
            spread = whole.spread_pct
    else:
        steps_per_s = 1000 / run.steps.step.mean_ms
        data_wait_pct = run.steps.data_wait_pct
        overhead = None
    memory = worker_pss_mib(run)
    predicted = None if prediction is None else prediction.epoch_steps_per_s if over_epochs else prediction.steps_per_s
    if predicted is not None and not math.isfinite(predicted):  # a zero-ms predicted step: no usable number
        predicted = None
    error = None if predicted is None else 100 * (predicted - steps_per_s) / steps_per_s
    return SweepPoint(
        num_workers=num_workers,
        run_dir=run_dir,
        trace_file=Path(run.info.trace_file),
        steps_per_s=steps_per_s,
        unprofiled=unprofiled is not None,
        over_epochs=over_epochs,
        data_wait_pct=data_wait_pct,
        worker_pss_mib=memory,
        predicted_steps_per_s=predicted,
        error_pct=error,
        num_workers_recorded=run.info.num_workers,
        profiler_overhead_pct=overhead,
        spread_pct=spread,
        distrust=distrust,
    )


def worker_pss_mib(run: RunReport) -> float | None:
    """The sum of the DataLoader workers' last PSS, MiB (0 without workers); None when unknown."""
    if run.loader is None:
        return None
    pss = [w.pss_mib_last for w in run.loader.workers if w.worker >= 0]
    known = [p for p in pss if p is not None]
    return None if len(known) < len(pss) else float(sum(known))


def judge(
    name: str,
    sweep_dir: Path,
    points: Sequence[SweepPoint],
    recommended: int | None,
    scalars_dir: Path | None = None,
    trials: TrialsResult | None = None,
) -> SweepResult:
    """Whether ``recommended`` (advised by the first of ``points``) held against what every point measured.

    ``points`` are measured on one basis (:func:`basis`), which the result states.

    It held when it was measured, came within :data:`~dlprof.advice.rules.WITHIN_BEST` of the best
    measured steps/s, and uses no more workers than the fewest measured within
    :data:`~dlprof.advice.rules.CHOOSE_WITHIN` of it: the rule the recommendation itself follows on predictions,
    applied to the measured speeds. ``trials``: the in-process trials that measured ``points``
    (None: one launch per count).
    """
    points = tuple(points)
    best = max(points, key=lambda r: (r.steps_per_s, -r.num_workers))  # ties: the fewer workers
    floor = (1 - WITHIN_BEST) * best.steps_per_s
    fewest = min(r.num_workers for r in points if close_enough(r.steps_per_s, best.steps_per_s))
    chosen = next((r for r in points if r.num_workers == recommended), None) if recommended is not None else None
    if recommended is None:
        held, outcome = None, OUTCOME_NO_RECOMMENDATION
    elif chosen is None:
        held, outcome = None, OUTCOME_NOT_MEASURED
    elif chosen.steps_per_s < floor:
        held, outcome = False, OUTCOME_SLOWER
    elif recommended > fewest:
        held, outcome = False, OUTCOME_MORE_WORKERS
    else:
        held, outcome = True, OUTCOME_HELD
    return SweepResult(
        name=name,
        sweep_dir=sweep_dir,
        points=points,
        from_run=points[0].num_workers,
        recommended=recommended,
        best_num_workers=best.num_workers,
        best_steps_per_s=best.steps_per_s,
        fewest_near_best=fewest,
        within_best_pct=100 * WITHIN_BEST,
        fewest_within_pct=100 * CHOOSE_WITHIN,
        held=held,
        outcome=outcome,
        recommended_steps_per_s=chosen.steps_per_s if chosen else None,
        recommended_below_best_pct=100 * (1 - chosen.steps_per_s / best.steps_per_s) if chosen else None,
        scalars_dir=scalars_dir,
        mode=MODE_LAUNCHES if trials is None else MODE_IN_PROCESS,
        rounds=None if trials is None else trials.rounds,
        rounds_planned=None if trials is None else trials.rounds_planned,
        notes=() if trials is None else trials.notes,
        headline=measured_headline(
            points[0].num_workers,
            fewest,
            [(r.num_workers, r.steps_per_s) for r in points],
            BASIS_WHOLE_EPOCHS if points[0].over_epochs else BASIS_IN_EPOCH,
            IN_THIS_SWEEP if trials is None else IN_THIS_TRAINING,
            trials,
        ),
    )


def write_scalars(directory: Path, points: Sequence[SweepPoint]) -> Path:
    """TensorBoard scalars, one point per count at global_step = num_workers (``tensorboard --logdir`` shows them).

    Only TensorBoard event files are written there (no ``.json``/``.gz``, which HTA would take for traces).
    """
    from torch.utils.tensorboard import SummaryWriter  # torch's start-up cost only when a sweep has point

    directory.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(directory))
    try:
        for point in sorted(points, key=lambda r: r.num_workers):
            writer.add_scalar(TAG_STEPS_PER_S, point.steps_per_s, global_step=point.num_workers)
            writer.add_scalar(TAG_DATA_WAIT_PCT, point.data_wait_pct, global_step=point.num_workers)
            if point.predicted_steps_per_s is not None:
                writer.add_scalar(TAG_PREDICTED_STEPS_PER_S, point.predicted_steps_per_s, global_step=point.num_workers)
    finally:
        writer.close()
    return directory


def _check_sweep_dir(sweep_dir: Path, name: str, counts: Sequence[int], in_process: bool) -> None:
    if not _NAME.match(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '.', '_' and '-' only")
    if in_process and any(sweep_dir.glob("*" + schema.TRACE_SUFFIX)):
        raise UsageError(f"{sweep_dir}: already holds a recorded run; choose another --name or delete {sweep_dir}")
    for n in counts:
        if any((sweep_dir / str(n)).glob("*" + schema.TRACE_SUFFIX)):
            raise UsageError(
                f"{sweep_dir / str(n)}: already holds a recorded run; choose another --name or delete {sweep_dir}"
            )


@contextlib.contextmanager
def _training_output_to_stderr():
    """While a run records, the training's own output goes to stderr: stdout carries only the report (``--format json |
    jq``)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no descriptor 1 (an embedded interpreter): leave the output where it is
        saved = None
    if saved is not None:
        try:
            os.dup2(2, 1)
        except OSError:
            os.close(saved)
            saved = None
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def sweep(counts: Sequence[int], request: RecordRequest, progress: Callable[[str], None] | None = None) -> SweepResult:
    """Measure ``request`` at every ``num_workers`` in ``counts``, and judge the first count's advice.

    Args:
        counts: the num_workers to measure (checked by :func:`check_counts`); the first count's profiled window
            makes the advice and the predictions that the others check.
        request: the record settings; ``request.out_dir / request.name`` is the sweep directory. With
            ``request.trials`` (its counts are set to ``counts`` here), one launch recorded into it tries every
            count in process; without, one launch per count, each into ``<sweep dir>/<count>/`` (the ``name``,
            ``overrides`` and ``trials`` of each launch are set here).
        progress: called with one line before each launch (e.g. to print it on stderr).

    Returns:
        The measured counts and the verdict; TensorBoard scalars are written to ``<sweep dir>/scalars/``.

    Raises:
        UsageError, InputError: bad counts, sweep name, schedule or command, or a run directory already
            holds a trace; nothing was run.
        RecordError: a launch failed (the message names the count), or the trials measured fewer than two counts;
            what was recorded is kept.
    """
    counts = check_counts(counts)
    sweep_dir = request.out_dir / request.name
    in_process = request.trials is not None
    _check_sweep_dir(sweep_dir, request.name, counts, in_process)
    # A command or schedule that cannot work fails for every count: say so once, before recording anything.
    Schedule(request.wait, request.warmup, request.active).check()
    child_argv(request.command)
    if in_process:
        points, recommended, trials = _in_process(counts, request, sweep_dir, progress)
    else:
        (points, recommended), trials = _launches(counts, request, sweep_dir, progress), None
    try:
        scalars: Path | None = write_scalars(sweep_dir / SCALARS_DIR, points)
    except ImportError:  # torch.utils.tensorboard needs the tensorboard package; the sweep itself does not
        scalars = None
        if progress is not None:
            progress("sweep: TensorBoard scalars not written (pip install tensorboard)")
    return judge(request.name, sweep_dir, points, recommended, scalars, trials)


def _record_one(request: RecordRequest, where: str, kept: str = "") -> tuple[RunReport, Path]:
    """Record ``request`` (the training's output on stderr) and analyse it; a failure names ``where``."""
    try:
        with _training_output_to_stderr():
            result = record(request)
        if result.status != schema.STATUS_COMPLETE:
            raise RecordError(
                f"the training failed ({result.error}); its partial trace is in {result.run_dir}",
                result.exit_code or 2,
            )
        return build_report(result.run_dir).runs[0], result.run_dir
    except DlprofError as error:
        raise RecordError(f"sweep: {where}: {error}{kept}", error.exit_code) from error


def _launches(
    counts: tuple[int, ...], request: RecordRequest, sweep_dir: Path, progress: Callable[[str], None] | None
) -> tuple[list[SweepPoint], int | None]:
    """One launch per count, each into ``<sweep dir>/<count>/``; the points and the first run's recommendation."""
    reports: list[RunReport] = []
    run_dirs: list[Path] = []
    for i, count in enumerate(counts, 1):
        if progress is not None:
            progress(f"sweep: num_workers={count} ({i}/{len(counts)}) -> {sweep_dir / str(count)}")
        one = replace(
            request,
            out_dir=sweep_dir,
            name=str(count),
            overrides={"num_workers": count},
            fresh_name_if_taken=False,
            trials=None,
        )
        kept = (
            ""
            if not reports
            else f"; the runs already recorded ({', '.join(str(n) for n in counts[: len(reports)])}) are kept in"
            f" {sweep_dir}"
        )
        report, run_dir = _record_one(one, f"num_workers={count}", kept)
        reports.append(report)
        run_dirs.append(run_dir)
    # One basis for every run, known once all are recorded: whole epochs only if every run and prediction knows them.
    over_epochs = basis(reports, counts) == BASIS_WHOLE_EPOCHS
    points = [measure(r, n, d, reports[0], over_epochs) for r, n, d in zip(reports, counts, run_dirs)]
    return points, reports[0].advice.model_num_workers


def _in_process(
    counts: tuple[int, ...], request: RecordRequest, sweep_dir: Path, progress: Callable[[str], None] | None
) -> tuple[list[SweepPoint], int | None, TrialsResult]:
    """One launch into the sweep directory at ``counts[0]``, trying every count in process; the points measured, the
    model's recommendation from its profiled window, and the trials."""
    assert request.trials is not None
    tried = replace(request.trials, counts=counts, persistent=False)
    one = replace(request, overrides={"num_workers": counts[0]}, trials=tried, fresh_name_if_taken=False)
    if progress is not None:
        progress(
            f"sweep: one launch at num_workers={counts[0]}, then num_workers {', '.join(str(n) for n in counts)} tried"
            f" in it, {tried.rounds} round(s) -> {sweep_dir}"
        )
    report, run_dir = _record_one(one, f"the launch at num_workers={counts[0]}")
    trials = report.trials
    if trials is None:
        raise RecordError(
            f"sweep: {run_dir}: the training ran no trials (see 'dlprof analyze {run_dir}'); let it train longer, or"
            " measure one launch per count with --launches"
        )
    points = [
        trial_point(t, trials, run_dir, Path(report.info.trace_file), report if n == counts[0] else None)
        for n in counts
        for t in trials.settings
        if t.num_workers == n and not t.persistent_workers and trials.measured(t) is not None
    ]
    if len(points) < MIN_COUNTS:
        measured = ", ".join(str(r.num_workers) for r in points) or "none"
        raise RecordError(
            f"sweep: {run_dir}: the trials measured {measured} of num_workers {', '.join(map(str, counts))} (see"
            f" 'dlprof analyze {run_dir}'); let the training run longer (--trial-steps), or use --launches"
        )
    return points, report.advice.model_num_workers, trials


def trial_point(
    trial: TrialSetting, trials: TrialsResult, run_dir: Path, trace_file: Path, recorded: RunReport | None
) -> SweepPoint:
    """One count as the in-process trials measured it, on their basis, against the prediction of the profiled window.

    Args:
        recorded: the run's report when ``trial`` is the count the launch was recorded at (its workers' memory is
            known).
    """
    speed = trial.speed
    measured = trials.measured(trial)
    assert speed is not None and measured is not None and trial.data_wait_pct is not None  # a measured trial has all
    memory = worker_pss_mib(recorded) if recorded is not None else None
    return SweepPoint(
        num_workers=trial.num_workers,
        run_dir=run_dir,
        trace_file=trace_file,
        steps_per_s=measured,
        unprofiled=True,
        over_epochs=trials.basis == BASIS_WHOLE_EPOCHS,
        data_wait_pct=trial.data_wait_pct,
        worker_pss_mib=memory,
        predicted_steps_per_s=trial.predicted_steps_per_s,
        error_pct=trial.error_pct,
        num_workers_recorded=trial.num_workers,
        profiler_overhead_pct=None
        if recorded is None or recorded.unprofiled is None
        else recorded.unprofiled.overhead_pct,
        spread_pct=speed.spread_pct,
        distrust=distrust(speed),
        paced_steps_per_s=trial.paced_steps_per_s,
        paced_error_pct=trial.paced_error_pct,
        sets_pace=trials.pace is not None
        and (trial.num_workers, trial.persistent_workers) == (trials.pace.num_workers, trials.pace.persistent_workers),
    )
