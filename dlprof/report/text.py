"""Plain-text renderer, for the terminal."""

from __future__ import annotations

from dlprof.report.common import (
    NODES_HEADER,
    NODES_SHOWN,
    PREDICTED_HEADER,
    RANKS_HEADER,
    SLOWEST_HEADER,
    SPREAD_HEADER,
    TRIALS_HEADER,
    breakdown_rows,
    evidence_line,
    headline_line,
    loader_rows,
    missing_ranks_line,
    node_rows,
    nodes_heading,
    predicted_rows,
    rank_count,
    rank_rows,
    ranks_heading,
    ranks_line,
    reason_rule,
    recommendation_line,
    rests_on_line,
    run_headline,
    run_line,
    setting,
    skipped_line,
    slowest_heading,
    slowest_rows,
    spread_rows,
    summarized,
    trials_heading,
    trials_rows,
)
from dlprof.report.findings import FINDINGS_HEADING, finding_fix, finding_title
from dlprof.report.format import ms, per_s, rate
from dlprof.report.speed import epoch_line, page_faults_line, plain_launch_line, unprofiled_line
from dlprof.report.tuning import status_note, tuned_line, tuning_cost_line
from dlprof.results.report import Report, RunReport


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda row: (
        "  " + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
    )
    return [fmt(header), *map(fmt, rows)]


def _run(run: RunReport) -> list[str]:
    info, steps, loader, gpu, advice = run.info, run.steps, run.loader, run.gpu, run.advice
    lines = [headline_line(run), *[f"  {e}" for e in (evidence_line(run),) if e], ""]
    lines += _findings(run)
    lines += [f"dlprof analyze: {info.name}  ({info.trace_file})", f"run: {run_line(info)}"]
    if note := status_note(info):
        lines.append(f"note: {note}")
    if missing := missing_ranks_line(run):
        lines.append(f"note: {missing}")
    lines += [
        (
            f"steps: {len(steps.steps)}, {steps.step.mean_ms:.2f} ms mean (p50 {steps.step.p50_ms:.2f}, p90"
            f" {steps.step.p90_ms:.2f}), {per_s(steps.step.mean_ms)} steps/s (profiled)"
        ),
        *[line for line in (unprofiled_line(run), plain_launch_line(run), epoch_line(run)) if line],
        *[f"note: {line}" for line in (page_faults_line(run),) if line],
        *_ranks(run),
        "",
        "Where a step's time goes (ms per step)",
    ]
    lines += _table(breakdown_rows(steps), ["", "mean", "p50", "p90", "%"])
    if loader is None:
        lines += [
            "",
            "Loader: unknown (no worker spans in this trace; record with 'dlprof record' to see inside the workers)",
        ]
    else:
        where = (
            "main process"
            if loader.in_main_process
            else f"{loader.workers_observed} worker{'s' if loader.workers_observed != 1 else ''}"
        )
        lines += ["", f"Loader, per batch ({len(loader.batches)} batches, {where})"]
        lines += _table(loader_rows(loader), ["", "wall ms", "CPU ms"])
        lines.append(
            f"  CPU/wall {loader.cpu_fraction:.2f}: {loader.bound}-bound; waiting for a core"
            f" {loader.batch_runq_ms_mean:.2f} ms per batch"
        )
        if loader.wait:
            lines.append(
                f"  the main process waited {loader.wait.not_ready_ms_mean:.2f} ms/step for batches still being"
                f" produced, {loader.wait.ready_ms_mean:.2f} ms/step for batches already produced"
            )
        for w in loader.workers:
            who = "main process" if w.worker < 0 else f"worker {w.worker}"
            memory = (
                ""
                if w.pss_mib_last is None
                else f", PSS {w.pss_mib_last:.1f} MiB"
                + ("" if w.pss_growth_mib_per_min is None else f" ({w.pss_growth_mib_per_min:+.1f} MiB/min)")
            )
            lines.append(
                f"  {who} (pid {w.pid}): {w.batches} batches, {w.batch_ms_mean:.2f} ms each, up to"
                f" {rate(w.capacity_per_s)} batches/s{memory}"
            )
    if gpu is not None:
        lines += [
            "",
            "GPU (ms per step)",
            (
                f"  busy {gpu.busy.mean_ms:.2f} ({gpu.busy_pct:.1f} %), idle {gpu.idle.mean_ms:.2f}: waiting for data"
                f" {gpu.idle_data.mean_ms:.2f}, for the host to launch {gpu.idle_launch.mean_ms:.2f}, other"
                f" {gpu.idle_other.mean_ms:.2f}"
            ),
            (
                f"  host-to-device copies {gpu.h2d.mean_ms:.2f} ms, {gpu.h2d_mib_per_step:.1f} MiB per step; "
                f"{gpu.h2d_copies} copies, {gpu.h2d_pageable_copies} from pageable memory"
            ),
        ]
    lines += ["", "Recommendation", "  " + recommendation_line(advice)]
    if advice.trainer_arguments:  # a Trainer (or ms-swift, LLaMA-Factory) created the DataLoader
        lines.append(f"  Trainer arguments: {advice.trainer_arguments}")
    rests_on = rests_on_line(run)
    if rests_on:
        lines.append(f"  The recommended num_workers {rests_on}")
    lines.append("  Evidence:")
    lines += [f"   - {e}" for e in advice.evidence]
    if run.trials is not None:
        lines += ["", trials_heading(run.trials)]
        lines += _table(trials_rows(run, " <"), TRIALS_HEADER)
        lines += [f"  {line}" for line in (tuned_line(run.trials), tuning_cost_line(run.trials)) if line]
        lines += [f"  - {note}" for note in run.trials.notes]
    if advice.predicted:
        lines += ["", "Predicted"]
        lines += _table(predicted_rows(advice, " <"), PREDICTED_HEADER)
    if advice.basis:
        lines += ["", "What this rests on"] + [f"  - {b}" for b in advice.basis]
    return lines


def _findings(run: RunReport) -> list[str]:
    """Faults of the input pipeline beyond the DataLoader's settings, each with its evidence and fix; nothing when
    there are none."""
    findings = run.advice.findings
    if not findings:
        return []
    lines = [FINDINGS_HEADING]
    for f in findings:
        lines += [f"  - {finding_title(f)}", f"    {f.evidence}", f"    {finding_fix(f)}"]
    return lines + [""]


def _ranks(run: RunReport) -> list[str]:
    if run.ranks is None:
        return []
    if summarized(run.ranks):
        return _ranks_summary(run)
    lines = ["", f"Ranks ({rank_count(run)}; ms per step, profiled; * the slowest, which sets the job's pace)"]
    lines += _table(rank_rows(run.ranks, "*"), RANKS_HEADER)
    lines += [
        f"  {ranks_line(run.ranks)}",
        (
            f"  The rest of this report is rank {run.ranks.slowest_rank}'s: num_workers is set per rank, and the"
            " slowest sets the pace."
        ),
    ]
    return lines


def _ranks_summary(run: RunReport) -> list[str]:
    """A job of many ranks summed up: the spread over the ranks, the slowest ranks, the machines."""
    ranks = run.ranks
    assert ranks is not None and ranks.summary is not None  # called where summarized(ranks)
    summary = ranks.summary
    lines = ["", f"Ranks ({ranks_heading(run)}; every rank in the JSON and HTML reports)"]
    lines += _table(spread_rows(summary), SPREAD_HEADER)
    lines += ["", f"  {slowest_heading(summary)}"]
    lines += ["  " + line for line in _table(slowest_rows(summary, "*"), SLOWEST_HEADER)]
    lines += [f"    {reason_rule()}"]
    shown = summary.nodes[:NODES_SHOWN]
    lines += ["", f"  {nodes_heading(summary, len(shown))}"]
    lines += ["  " + line for line in _table(node_rows(shown), NODES_HEADER)]
    lines += [
        "",
        f"  {ranks_line(ranks, compact=True)}",
        (
            f"  The rest of this report is rank {ranks.slowest_rank}'s: num_workers is set per rank, and the"
            " slowest sets the pace."
        ),
    ]
    return lines


def _comparison(report: Report) -> list[str]:
    rows = [
        [
            r.info.name,
            setting(r.info.num_workers),
            ms(r.steps.step.mean_ms),
            per_s(r.steps.step.mean_ms),
            f"{r.steps.data_wait_pct:.1f}",
            r.advice.verdict,
            setting(r.advice.num_workers),
        ]
        for r in report.runs
    ]
    return (
        [run_headline(r) for r in report.runs]
        + ["", "Runs compared"]
        + _table(rows, ["run", "num_workers", "step ms", "steps/s", "wait %", "input-bound", "recommended"])
        + [""]
    )


def render(report: Report) -> str:
    lines = _comparison(report) if len(report.runs) > 1 else []
    for i, run in enumerate(report.runs):
        if i:
            lines += ["", "-" * 80, ""]
        lines += _run(run)
    if report.skipped:
        lines += [""] + [skipped_line(s) for s in report.skipped]
    return "\n".join(lines) + "\n"
