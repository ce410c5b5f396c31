"""``dlprof analyze``: trace -> analysis -> advice, into the Report every renderer takes. Renderers only format it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dlprof import schema
from dlprof.advice.rules import advise
from dlprof.analysis.gpu import gpu_stats
from dlprof.analysis.intervals import Timeline
from dlprof.analysis.loader import loader_stats
from dlprof.analysis.ranks import compare_ranks, missing_ranks, rank_stats
from dlprof.analysis.steps import segments_between, step_breakdown, step_segments
from dlprof.analysis.trials import trials_result, with_predictions
from dlprof.analysis.unprofiled import unprofiled_stats
from dlprof.errors import DlprofError, TraceFormatError, display
from dlprof.results.report import Lane, Report, RunInfo, RunReport, Skipped, TimelinePicture
from dlprof.trace.discover import find_job_runs, is_profiler_trace_name, load_run
from dlprof.trace.run import TraceRun


def _batches_per_step(run: TraceRun) -> float:
    if not run.steps:
        return 1.0
    lo, hi = run.steps[0].start_us, run.steps[-1].end_us
    inside = sum(1 for c in run.next_calls if lo <= c.start_us < hi)
    return max(1.0, round(inside / len(run.steps), 2))


def _info(run: TraceRun, batches_per_step: float) -> RunInfo:
    manifest = run.manifest
    loader = manifest.loader if manifest else None
    host = manifest.host if manifest else None
    gpu = host.gpu if host else None
    return RunInfo(
        name=run.name,
        trace_file=display(run.path),
        status=manifest.status if manifest else None,
        device="cuda" if run.has_gpu else "cpu",
        num_workers=loader.num_workers if loader else (0 if run.loads_in_main_process else None),
        batch_size=loader.batch_size if loader else None,
        pin_memory=loader.pin_memory if loader else None,
        prefetch_factor=loader.prefetch_factor if loader else None,
        persistent_workers=loader.persistent_workers if loader else None,
        usable_cores=host.usable_cores if host else None,
        ram_total_mib=host.ram_total_mib if host else None,
        gpu_name=gpu.name if gpu else None,
        torch_version=manifest.versions.get("torch") if manifest else None,
        steps_recorded=len(run.steps),
        batches_per_step=batches_per_step,
        has_worker_spans=run.has_loader_spans,
    )


#: Steps shown in the timeline picture: enough to see the rhythm of waits, few enough to read.
TIMELINE_STEPS = 3


def _timeline(run: TraceRun, other_ranks: Sequence[TraceRun] = ()) -> TimelinePicture:
    """A few steps of ``run``; with ``other_ranks``, their training threads over the same stretch of time, as lanes."""
    first = 1 if len(run.steps) > TIMELINE_STEPS else 0  # the first recorded step often carries warm-up
    shown = run.steps[first : first + TIMELINE_STEPS]
    lo, hi = shown[0].start_us, shown[-1].end_us
    rel = lambda us: round((us - lo) / 1000, 4)
    main_label = f"rank {run.rank} main thread" if other_ranks else "main thread"
    lanes = [
        Lane(
            main_label,
            [(g.category, rel(g.start_us), rel(g.end_us)) for g in step_segments(run, first, TIMELINE_STEPS)],
        )
    ]
    for other in other_ranks:
        # Each trace counts from its own base time; on one clock (CLOCK_REALTIME) the shift lines them up.
        shift = other.base_us - run.base_us
        segments = segments_between(other, lo - shift, hi - shift)
        lanes.append(
            Lane(
                f"rank {other.rank} main thread",
                [(g.category, rel(g.start_us + shift), rel(g.end_us + shift)) for g in segments],
            )
        )
    by_pid: dict[int, list] = {}
    for span in run.loader_spans:
        if span.name != schema.SPAN_BATCH and span.end_us > lo and span.start_us < hi:
            by_pid.setdefault(span.pid, []).append(span)
    for _pid, spans in sorted(by_pid.items(), key=lambda kv: (kv[1][0].worker, kv[0])):
        worker = spans[0].worker
        label = "loader (main process)" if worker < 0 else f"worker {worker}"
        lanes.append(Lane(label, [(s.name, rel(max(s.start_us, lo)), rel(min(s.end_us, hi))) for s in spans]))
    if run.gpu:
        busy = Timeline((g.start_us, g.end_us) for g in run.gpu).clip(lo, hi)
        lanes.append(Lane("GPU", [("gpu", rel(s), rel(e)) for s, e in busy]))
    return TimelinePicture(rel(hi), [rel(s.start_us) for s in shown], lanes)


def analyze_run(run: TraceRun) -> RunReport:
    """All analyses of one trace."""
    steps = step_breakdown(run)
    loader = loader_stats(run)
    gpu = gpu_stats(run)
    batches_per_step = _batches_per_step(run)
    manifest = run.manifest
    unprofiled = unprofiled_stats(manifest, batches_per_step)
    measured = trials_result(manifest, batches_per_step, loader)
    problems = run.trace_problems + run.manifest_problems
    advice = advise(
        steps, loader, gpu, manifest, batches_per_step, run.loads_in_main_process, unprofiled, problems, measured
    )
    trials = None
    if measured is not None:  # the predictions are for the training loader's persistent_workers, as recorded
        persistent = bool(manifest.loader is not None and manifest.loader.persistent_workers)
        trials = with_predictions(measured, advice.predicted, persistent)
    info = _info(run, batches_per_step)
    return RunReport(info, steps, loader, gpu, advice, _timeline(run), unprofiled, manifest, trials=trials)


def analyze_job(runs: Sequence[TraceRun]) -> RunReport:
    """A run of several ranks: the slowest rank's report, with every rank side by side (``ranks``)."""
    reports = {run.rank: analyze_run(run) for run in runs}
    by_rank = {run.rank: run for run in runs}
    rows = []
    for run in runs:
        report = reports[run.rank]
        rows.append(
            rank_stats(run, report.steps, report.loader, report.unprofiled.step_ms if report.unprofiled else None)
        )
    comparison = compare_ranks(rows)
    pace = by_rank[comparison.slowest_rank]
    others = [by_rank[r.rank] for r in comparison.ranks if r.rank != comparison.slowest_rank]
    return replace(reports[comparison.slowest_rank], timeline=_timeline(pace, others), ranks=comparison)


def _distinct_ranks(runs: list[TraceRun]) -> list[TraceRun]:
    """One trace per rank (a second file claiming a rank is left out, as HTA does), by rank."""
    seen: dict[int, TraceRun] = {}
    for run in runs:
        seen.setdefault(run.rank if run.rank is not None else 0, run)
    return [seen[rank] for rank in sorted(seen)]


def _load_files(files: list[Path], name: str, skipped: list[Skipped]) -> list[TraceRun]:
    """The traces of one run. Files not named as profiler traces that turn out not to be traces (a report
    written there, notes) are skipped with a note, as long as one trace is left."""
    runs, errors, first = [], [], None
    for trace in files:
        try:
            runs.append(load_run(trace, name))
        except DlprofError as error:
            if is_profiler_trace_name(trace) or len(files) == 1:
                raise
            errors.append(Skipped(display(trace), f"not a trace: {error}"))
            first = first or error
    if not runs:
        raise first
    skipped += errors
    return runs


def analyze_traces(files: list[Path], name: str, skipped: list[Skipped] | None = None) -> RunReport:
    """The report of one run from its trace files: its one rank's, or the slowest rank's with every rank side by side;
    the ranks of the job's world size that left no trace are named (``missing_ranks``).

    Files not named as profiler traces that turn out not to be traces (a report written there, notes) are
    left out and named in ``skipped``, as long as one trace is left.

    Raises:
        DlprofError: no readable trace among ``files``, or the trace cannot be analysed.
    """
    runs = _distinct_ranks(_load_files(files, name, skipped if skipped is not None else []))
    report = analyze_run(runs[0]) if len(runs) == 1 else analyze_job(runs)
    return replace(report, missing_ranks=missing_ranks(runs))


def build_report(path: Path | Sequence[Path]) -> Report:
    """Analyse a run directory (all its ranks), a trace file, or a directory of runs; or, given several, the run
    directories (or trace files) that the nodes of one job wrote each on their own, as one run.

    In a directory of runs, a run that cannot be read or analysed is skipped and named in
    ``Report.skipped``; only when none can be is it an error.

    Raises:
        DlprofError: no readable trace (the message names the file and the fix); several paths not of one job.
    """
    paths = [path] if isinstance(path, Path) else list(path)
    path = paths[0]
    groups, unreadable = find_job_runs(paths)
    skipped = [Skipped(display(sub), why) for sub, why in unreadable]
    reports = []
    for files in groups:
        name = files[0].name if path.is_file() else files[0].parent.name
        notes: list[Skipped] = []
        try:
            reports.append(analyze_traces(files, name, notes))
        except DlprofError as error:
            if len(groups) == 1:
                raise
            skipped.append(Skipped(display(files[0].parent), str(error)))
            continue
        skipped += notes
    if not reports:
        raise TraceFormatError(
            f"{display(path)}: none of its {len(groups)} runs could be read; first: {skipped[0].reason}"
        )
    return Report(reports, skipped=skipped)
