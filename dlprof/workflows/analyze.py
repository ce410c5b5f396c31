"""``dlprof analyze``: trace -> analysis -> advice, into the Report every renderer takes. Renderers only format it."""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlprof.advice.headline import headline
from dlprof.advice.rules import advise
from dlprof.analysis.gpu import gpu_stats
from dlprof.analysis.intervals import Timeline
from dlprof.analysis.loader import loader_stats
from dlprof.analysis.ranks import compare_ranks, missing_ranks, rank_stats, slowness
from dlprof.analysis.steps import TimelineBar, bars_between, bars_by_step, step_bars, step_breakdown
from dlprof.analysis.trials import trials_result
from dlprof.analysis.unprofiled import unprofiled_stats
from dlprof.core import schema
from dlprof.core.errors import DlprofError, TraceFormatError, display
from dlprof.results.analysis import RankStats
from dlprof.results.report import Lane, Report, RunInfo, RunReport, Skipped, TimelinePicture
from dlprof.trace.discover import find_job_runs, is_profiler_trace_name, load_run
from dlprof.trace.run import TraceRun
from dlprof.workflows.parallel import default_processes, json_bytes, run_tasks


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


def _window(run: TraceRun) -> tuple[int, float, float]:
    """The steps the timeline shows: the index of the first, and their stretch of the trace's clock."""
    first = 1 if len(run.steps) > TIMELINE_STEPS else 0  # the first recorded step often carries warm-up
    shown = run.steps[first : first + TIMELINE_STEPS]
    return first, shown[0].start_us, shown[-1].end_us


def _timeline(run: TraceRun) -> TimelinePicture:
    """A few steps of ``run``: its main thread, each loader process and the GPU, as lanes (a job's other ranks are
    added by :func:`_job_timeline`)."""
    first, lo, hi = _window(run)
    shown = run.steps[first : first + TIMELINE_STEPS]
    rel = lambda us: round((us - lo) / 1000, 4)
    lanes = [
        Lane(
            "main thread",
            [(g.category, rel(g.start_us), rel(g.end_us)) for g in step_bars(run, first, TIMELINE_STEPS)],
        )
    ]
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
    unprofiled = unprofiled_stats(manifest, batches_per_step, run.plain_launch)
    measured = trials_result(manifest, batches_per_step, loader)
    problems = run.trace_problems + run.manifest_problems
    advice, trials = advise(
        steps, loader, gpu, manifest, batches_per_step, run.loads_in_main_process, unprofiled, problems, measured
    )
    info = _info(run, batches_per_step)
    advice = replace(advice, headline=headline(advice, info, trials))
    return RunReport(
        info=info,
        steps=steps,
        loader=loader,
        gpu=gpu,
        advice=advice,
        timeline=_timeline(run),
        unprofiled=unprofiled,
        manifest=manifest,
        trials=trials,
    )


@dataclass(frozen=True, kw_only=True)
class AnalyzedRank:
    """One trace file analysed, as a worker hands it back: small, never the trace itself.

    Its report and its row among the ranks, and what the job's timeline needs of it: its clock's base, the
    stretch its own timeline shows, every step's bounds, and the category bars of its first
    :data:`LANE_STEPS` steps (the ranks of a job step together, so another rank's stretch falls among them).
    """

    trace: Path
    name: str
    rank: int | None
    #: The job's world size as the trace's manifest says (None: unknown, or no manifest).
    world_size: int | None
    report: RunReport
    row: RankStats
    base_us: float
    window_us: tuple[float, float]
    step_bounds_us: tuple[tuple[float, float], ...]
    #: Per step kept: its bars' categories, and their (start, end) µs one after another (compact: as objects, they
    #: would be most of a summary).
    step_bars: tuple[tuple[tuple[str, ...], array], ...]


@dataclass(frozen=True)
class FailedRank:
    """A trace file that could not be read (``loading``) or analysed, as a worker hands it back."""

    trace: Path
    rank: int | None
    error: DlprofError
    loading: bool


#: Ranks the timeline draws a lane for (the slowest): beyond this, lanes too thin to read, and each a trace to line up.
TIMELINE_RANKS = 16
#: Steps whose bars a rank hands back: the stretch of another rank's timeline, with room for ranks that
#: started their profiled steps a few steps apart (further apart, the trace is read again for it).
LANE_STEPS = 2 * TIMELINE_STEPS + 2


def summarize_run(run: TraceRun) -> AnalyzedRank:
    """All analyses of one rank's trace, and what the job's report needs of it."""
    report = analyze_run(run)
    row = rank_stats(run, report.steps, report.loader, report.unprofiled.step_ms if report.unprofiled else None)
    _, lo, hi = _window(run)
    return AnalyzedRank(
        trace=run.path,
        name=run.name,
        rank=run.rank,
        world_size=run.manifest.world_size if run.manifest is not None else None,
        report=report,
        row=row,
        base_us=run.base_us,
        window_us=(lo, hi),
        step_bounds_us=tuple((step.start_us, step.end_us) for step in run.steps),
        step_bars=tuple(
            (tuple(g.category for g in step), array("d", [us for g in step for us in (g.start_us, g.end_us)]))
            for step in bars_by_step(run, LANE_STEPS)
        ),
    )


def summarize_trace(trace: Path, name: str, cwd: str | None = None, progress: bool = False):
    """A worker's task: read and analyse one trace file, into an :class:`AnalyzedRank` (or a :class:`FailedRank`).

    ``cwd``: the caller's directory, where a relative ``trace`` lies (a Ray worker runs elsewhere); the report
    names the file as given.
    """
    where = Path(cwd) / trace if cwd and not trace.is_absolute() and Path.cwd() != Path(cwd) else trace
    try:
        run = load_run(where, name, progress=progress)
    except DlprofError as error:
        return FailedRank(trace, None, error, loading=True)
    run.path = trace
    try:
        return summarize_run(run)
    except DlprofError as error:
        return FailedRank(trace, run.rank, error, loading=False)


def _bars_between(rank: AnalyzedRank, lo_us: float, hi_us: float) -> list[TimelineBar]:
    """:func:`~dlprof.analysis.steps.bars_between` of the rank's trace, from its summary (or its trace, when the
    stretch reaches past the steps it kept)."""
    shown = [i for i, (start, end) in enumerate(rank.step_bounds_us) if end > lo_us and start < hi_us]
    if not shown:
        return []
    if shown[-1] >= len(rank.step_bars):
        return bars_between(load_run(rank.trace, rank.name, progress=False), lo_us, hi_us)
    bars = []
    for i in shown:
        categories, bounds_us = rank.step_bars[i]
        for k, category in enumerate(categories):
            start, end = bounds_us[2 * k], bounds_us[2 * k + 1]
            if end > lo_us and start < hi_us:
                bars.append(TimelineBar(category, max(start, lo_us), min(end, hi_us)))
    return sorted(bars, key=lambda g: g.start_us)


def _job_timeline(pace: AnalyzedRank, others: Sequence[AnalyzedRank]) -> TimelinePicture:
    """The pace rank's timeline, with the other ranks' training threads over the same stretch of time as lanes."""
    picture = pace.report.timeline
    lo, hi = pace.window_us
    rel = lambda us: round((us - lo) / 1000, 4)
    main, *rest = picture.lanes
    lanes = [Lane(f"rank {pace.rank} main thread", main.bars)]
    for other in others:
        # Each trace counts from its own base time; on one clock (CLOCK_REALTIME) the shift lines them up.
        shift = other.base_us - pace.base_us
        bars = _bars_between(other, lo - shift, hi - shift)
        lanes.append(
            Lane(
                f"rank {other.rank} main thread",
                [(g.category, rel(g.start_us + shift), rel(g.end_us + shift)) for g in bars],
            )
        )
    return replace(picture, lanes=lanes + rest)


def analyze_job(ranks: Sequence[AnalyzedRank]) -> RunReport:
    """A run of several ranks: the slowest rank's report, with every rank side by side (``ranks``)."""
    comparison = compare_ranks([rank.row for rank in ranks])
    by_rank = {rank.row.rank: rank for rank in ranks}
    pace = by_rank[comparison.slowest_rank]
    # The timeline's lanes: beyond TIMELINE_RANKS, the slowest ranks only (in rank order), and how many are not drawn.
    drawn = {r.rank for r in sorted(comparison.ranks, key=slowness)[:TIMELINE_RANKS]}
    others = [by_rank[r.rank] for r in comparison.ranks if r.rank != comparison.slowest_rank and r.rank in drawn]
    timeline = replace(_job_timeline(pace, others), ranks_not_drawn=len(comparison.ranks) - len(drawn))
    return replace(pace.report, timeline=timeline, ranks=comparison)


def _run_report(files: Sequence[Path], outcomes: Sequence, skipped: list[Skipped]) -> RunReport:
    """The report of one run from what its files' tasks handed back: its one rank's, or the slowest rank's with every
    rank side by side. One trace per rank (a second file claiming a rank is left out, as HTA does); files not
    named as profiler traces that turn out not to be traces are skipped with a note, as long as one is left."""
    loaded, notes = [], []
    first: DlprofError | None = None
    for trace, outcome in zip(files, outcomes):
        if isinstance(outcome, FailedRank) and outcome.loading:
            if is_profiler_trace_name(trace) or len(files) == 1:
                raise outcome.error
            notes.append(Skipped(display(trace), f"not a trace: {outcome.error}"))
            first = first or outcome.error
        else:
            loaded.append((trace, outcome))
    if not loaded:
        assert first is not None  # no file loaded: each one's error was kept, or raised
        raise first
    distinct: dict[int, tuple[Path, AnalyzedRank | FailedRank]] = {}
    for trace, outcome in loaded:
        rank = outcome.rank if outcome.rank is not None else 0
        kept = distinct.setdefault(rank, (trace, outcome))
        if kept[0] != trace:  # two nodes' directories given twice, or a rank recorded twice: say which was used
            notes.append(
                Skipped(display(trace), f"a second trace of rank {rank}: left out ({display(kept[0])} is used)")
            )
    skipped += notes
    ranks: list[AnalyzedRank] = []
    for rank in sorted(distinct):
        outcome = distinct[rank][1]
        if isinstance(outcome, FailedRank):
            raise outcome.error
        ranks.append(outcome)
    report = ranks[0].report if len(ranks) == 1 else analyze_job(ranks)
    return replace(report, missing_ranks=missing_ranks([r.rank for r in ranks], [r.world_size for r in ranks]))


def _summarize_all(groups: Sequence[tuple[Sequence[Path], str]], processes: int | None, ray: str | None) -> list:
    """Every file's task, run ``processes`` at a time (None: as many as the cores and memory allow) or on Ray."""
    calls = [(trace, name) for files, name in groups for trace in files]
    sizes = [json_bytes(trace) for trace, _ in calls]
    if processes is None:
        processes = default_processes(sizes)
    one = len(calls) == 1
    cwd = os.getcwd() if ray is not None else None
    return run_tasks(
        summarize_trace, [(trace, name, cwd, one) for trace, name in calls], processes=processes, ray=ray, sizes=sizes
    )


def analyze_traces(
    files: list[Path],
    name: str,
    skipped: list[Skipped] | None = None,
    processes: int | None = 1,
    ray: str | None = None,
) -> RunReport:
    """The report of one run from its trace files: its one rank's, or the slowest rank's with every rank side by side;
    the ranks of the job's world size that left no trace are named (``missing_ranks``).

    Files not named as profiler traces that turn out not to be traces (a report written there, notes) are
    left out and named in ``skipped``, as long as one trace is left. ``processes`` and ``ray`` as for
    :func:`build_report`.

    Raises:
        DlprofError: no readable trace among ``files``, or the trace cannot be analysed.
    """
    outcomes = _summarize_all([(files, name)], processes, ray)
    return _run_report(files, outcomes, skipped if skipped is not None else [])


def build_report(path: Path | Sequence[Path], processes: int | None = 1, ray: str | None = None) -> Report:
    """Analyse a run directory (all its ranks), a trace file, or a directory of runs; or, given several, the run
    directories (or trace files) that the nodes of one job wrote each on their own, as one run.

    In a directory of runs, a run that cannot be read or analysed is skipped and named in
    ``Report.skipped``; only when none can be is it an error.

    Each trace file (a rank) is read and analysed on its own, ``processes`` at a time in worker processes (None: as
    many as the usable cores and the available memory allow), or on the Ray cluster ``ray`` (``auto``: the one
    in ``RAY_ADDRESS``; ``local``: one started here); only their small summaries come back. The report is the
    same whichever runs them.

    Raises:
        DlprofError: no readable trace (the message names the file and the fix); several paths not of one job; Ray
            missing or unreachable.
    """
    paths = [path] if isinstance(path, Path) else list(path)
    path = paths[0]
    groups, unreadable = find_job_runs(paths)
    skipped = [Skipped(display(sub), why) for sub, why in unreadable]
    named = [(files, files[0].name if path.is_file() else files[0].parent.name) for files in groups]
    outcomes = iter(_summarize_all(named, processes, ray))
    reports = []
    for files, _name in named:
        mine = [next(outcomes) for _ in files]
        notes: list[Skipped] = []
        try:
            reports.append(_run_report(files, mine, notes))
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
