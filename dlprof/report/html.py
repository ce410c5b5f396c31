"""HTML renderer: one self-contained page (inline CSS and SVG, no scripts, nothing fetched).

Per run: the headline (what to change, what it buys), the input-bound verdict, the run's facts, the recommendation
with its evidence, and three pictures (timeline, per-step breakdown, predicted throughput, drawn by
:mod:`dlprof.report.charts`), then the tables behind them. Every picture is an inline ``<svg role="img">`` with a
``data-picture`` attribute, so a test or a reader can find it; every number drawn comes from the Report.
"""

from __future__ import annotations

import math

from dlprof.report import page
from dlprof.report.charts import breakdown_svg, predicted_svg, prediction_lines, timeline_svg
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
    headline_class,
    headline_line,
    is_recommended_trial,
    known,
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
    setting,
    skipped_line,
    slowest_heading,
    slowest_rows,
    spread_rows,
    summarized,
    trials_heading,
    trials_rows,
)
from dlprof.report.findings import FINDINGS_HEADING, finding_fix, finding_gain
from dlprof.report.format import ms, per_s
from dlprof.report.page import esc
from dlprof.report.rank_pictures import heat_map_svg, histogram_svg
from dlprof.report.speed import epoch_line, page_faults_line, plain_launch_line, unprofiled_line
from dlprof.report.tuning import status_note, tuned_line, tuning_cost_line
from dlprof.results.analysis import CATEGORIES
from dlprof.results.report import Report, RunReport

VERDICT_CLASS = {"HIGHLY": "bad", "MODERATELY": "warn", "NOT": "good"}


def _headline_class(run: RunReport) -> str:
    if run.advice.headline is None:  # an Advice made without one: the input-bound verdict leads, in its colour
        return VERDICT_CLASS.get(run.advice.verdict, "warn")
    return headline_class(run.advice.headline)


# --- tables ----------------------------------------------------------------------------------------


def _facts(run: RunReport) -> str:
    info, steps = run.info, run.steps
    rows = [
        ("device", info.device + (f" ({info.gpu_name})" if info.gpu_name else "")),
        (
            "DataLoader",
            (
                f"num_workers={known(info.num_workers)}, batch_size={known(info.batch_size)},"
                f" pin_memory={known(info.pin_memory)}, prefetch_factor={known(info.prefetch_factor)},"
                f" persistent_workers={known(info.persistent_workers)}"
            ),
        ),
        ("usable cores", known(info.usable_cores)),
        ("RAM", "unknown" if info.ram_total_mib is None else f"{info.ram_total_mib} MiB"),
        ("torch", known(info.torch_version)),
        (
            "steps",
            (
                f"{len(steps.steps)} recorded, {steps.step.mean_ms:.2f} ms mean (p50 {steps.step.p50_ms:.2f}, p90"
                f" {steps.step.p90_ms:.2f}), {per_s(steps.step.mean_ms)} steps/s (profiled); {info.batches_per_step:g}"
                " batch(es) per step"
            ),
        ),
        *[
            (label, line)
            for label, line in (
                ("unprofiled", unprofiled_line(run)),
                ("plain launch", plain_launch_line(run)),
                ("epochs", epoch_line(run)),
                ("page faults", page_faults_line(run)),
            )
            if line
        ],
    ]
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts"><tbody>{cells}</tbody></table>'


def _breakdown_table(run: RunReport) -> str:
    steps = run.steps
    return page.table(
        ["ms per step", "mean", "p50", "p90", "%"], breakdown_rows(steps), [""] * len(CATEGORIES) + ["total"]
    )


def _loader_tables(run: RunReport) -> str:
    loader = run.loader
    if loader is None:
        return (
            "<p>Loader: unknown (no worker spans in this trace; record with <code>dlprof record</code> to see inside"
            " the workers).</p>"
        )
    where = "main process" if loader.in_main_process else f"{loader.workers_observed} workers"
    parts = [
        f"<h3>Loader, per batch ({len(loader.batches)} batches, {esc(where)})</h3>",
        page.table(["per batch", "wall ms", "CPU ms"], loader_rows(loader), ["", "", "", "total"]),
        (
            f"<p>CPU/wall {loader.cpu_fraction:.2f}: {esc(loader.bound)}-bound; waiting for a core"
            f" {loader.batch_runq_ms_mean:.2f} ms per batch."
        ),
    ]
    if loader.wait:
        parts.append(
            f" The main process waited {loader.wait.not_ready_ms_mean:.2f} ms/step for batches still being produced, "
            f"{loader.wait.ready_ms_mean:.2f} ms/step for batches already produced."
        )
    parts.append("</p>")
    parts.append(
        page.table(
            ["process", "pid", "batches", "ms/batch", "batches/s", "PSS MiB", "PSS growth MiB/min"],
            [
                [
                    "main process" if w.worker < 0 else f"worker {w.worker}",
                    str(w.pid),
                    str(w.batches),
                    ms(w.batch_ms_mean),
                    "-" if w.capacity_per_s is None else f"{w.capacity_per_s:.1f}",
                    ms(w.pss_mib_last),
                    ms(w.pss_growth_mib_per_min),
                ]
                for w in loader.workers
            ],
        )
    )
    return "".join(parts)


def _gpu_table(run: RunReport) -> str:
    gpu = run.gpu
    if gpu is None:
        return "<p>GPU: none in this trace.</p>"
    rows = [
        ["busy", ms(gpu.busy.mean_ms), ms(gpu.busy.p90_ms)],
        ["idle", ms(gpu.idle.mean_ms), ms(gpu.idle.p90_ms)],
        ["idle: waiting for data", ms(gpu.idle_data.mean_ms), ms(gpu.idle_data.p90_ms)],
        ["idle: waiting for the host to launch", ms(gpu.idle_launch.mean_ms), ms(gpu.idle_launch.p90_ms)],
        ["idle: other", ms(gpu.idle_other.mean_ms), ms(gpu.idle_other.p90_ms)],
        ["host-to-device copies", ms(gpu.h2d.mean_ms), ms(gpu.h2d.p90_ms)],
    ]
    return (
        f"<h3>GPU (busy {gpu.busy_pct:.1f} %)</h3>"
        + page.table(["GPU, ms per step", "mean", "p90"], rows)
        + f"<p>{gpu.h2d_copies} host-to-device copies, {gpu.h2d_pageable_copies} from pageable memory, "
        f"{gpu.h2d_mib_per_step:.1f} MiB per step.</p>"
    )


def _predicted_table(run: RunReport) -> str:
    advice = run.advice
    classes = ["chosen" if p.num_workers == advice.num_workers else "" for p in advice.predicted]
    return page.table(PREDICTED_HEADER, predicted_rows(advice), classes)


def _findings(run: RunReport) -> str:
    """Faults of the input pipeline beyond the DataLoader's settings: per finding its severity, title and gain, its
    evidence and its fix; ``data-finding`` names its id."""
    items = []
    for f in run.advice.findings:
        bought = finding_gain(f)
        items.append(
            f'<li class="finding {esc(f.severity)}" data-finding="{esc(f.id)}"><strong>[{esc(f.severity)}]'
            f" {esc(f.title)}</strong>"
            + (f": {esc(bought)}" if bought else "")
            + f"<br>{esc(f.evidence)}<br>{esc(finding_fix(f))}</li>"
        )
    return f'<div class="rec findings"><h3>{esc(FINDINGS_HEADING)}</h3><ul>{"".join(items)}</ul></div>'


# --- page ------------------------------------------------------------------------------------------


def _run(run: RunReport, index: int) -> str:
    info, advice = run.info, run.advice
    rid = f"run-{index}"
    parts = [
        f'<section class="run" id="{rid}">',
        f"<h2>Run: {esc(info.name)}</h2>",
        f'<p class="sub">{esc(info.trace_file)}</p>',
        f'<p class="verdict headline {_headline_class(run)}">{esc(headline_line(run))}</p>',
    ]
    if evidence := evidence_line(run):
        parts.append(f'<p class="input-bound {VERDICT_CLASS.get(advice.verdict, "warn")}">{esc(evidence)}</p>')
    if advice.findings:
        parts.append(_findings(run))
    if note := status_note(info):
        parts.append(f'<p class="note">Note: {esc(note)}.</p>')
    if missing := missing_ranks_line(run):
        parts.append(f'<p class="note missing-ranks">Note: {esc(missing)}.</p>')
    parts.append(_facts(run))
    if run.ranks is not None and summarized(run.ranks):
        parts += _ranks_summary(run, rid)
    elif run.ranks is not None:
        ranks = run.ranks
        parts.append(f"<h3>Ranks ({esc(rank_count(run))}; ms per step, profiled)</h3>")
        parts.append(
            page.table(
                RANKS_HEADER,
                rank_rows(ranks, " (slowest)"),
                ["slowest" if r.rank == ranks.slowest_rank else "" for r in ranks.ranks],
                cls="ranks",
            )
        )
        parts.append(
            f'<p class="ranks-line">{esc(ranks_line(ranks))}. The rest of this report is rank {ranks.slowest_rank}\'s: '
            "num_workers is set per rank, and the slowest sets the pace.</p>"
        )
    parts.append('<div class="rec"><h3>Recommendation</h3>')
    parts.append(f'<p class="settings"><code>{esc(recommendation_line(advice))}</code></p>')
    if advice.trainer_arguments:  # a Trainer (or ms-swift, LLaMA-Factory) created the DataLoader
        parts.append(f'<p class="settings">Trainer arguments: <code>{esc(advice.trainer_arguments)}</code></p>')
    rests_on = rests_on_line(run)
    if rests_on:
        parts.append(f'<p class="rests-on">The recommended num_workers {esc(rests_on)}.</p>')
    parts.append("<p>Evidence:</p><ul>" + "".join(f"<li>{esc(e)}</li>" for e in advice.evidence) + "</ul>")
    if advice.basis:
        parts.append("<p>What this rests on:</p><ul>" + "".join(f"<li>{esc(b)}</li>" for b in advice.basis) + "</ul>")
    parts.append("</div>")

    tl = run.timeline
    parts.append("<h3>Timeline</h3>")
    parts.append(
        page.figure(
            timeline_svg(tl, f"{rid}-timeline-title"),
            f"{len(tl.step_starts_ms)} consecutive steps ({tl.duration_ms:.1f} ms). Main thread coloured by where the"
            " step's time goes, loader lanes by what the process was doing, GPU lane where any kernel or copy ran."
            " Dashed lines: step boundaries. Lighter shading: activity covering only part of that stretch at this"
            " scale.",
        )
    )
    if tl.ranks_not_drawn and run.ranks is not None:
        parts.append(
            f'<p class="note timeline-ranks">The timeline draws the training threads of the'
            f" {len(run.ranks.ranks) - tl.ranks_not_drawn} slowest ranks; {tl.ranks_not_drawn} other ranks are not"
            " drawn (every rank is in the ranks above).</p>"
        )
    parts.append("<h3>Where each step's time goes</h3>")
    parts.append(
        page.figure(
            breakdown_svg(run, f"{rid}-breakdown-title"),
            f"{len(run.steps.steps)} recorded steps, each split into data wait, host-to-device copies, forward,"
            " backward, optimizer and other.",
        )
    )
    parts += _throughput(run, rid)
    parts.append("<details><summary>Step breakdown, loader and GPU details</summary>")
    parts.append("<h3>Step breakdown</h3>" + _breakdown_table(run))
    parts.append(_loader_tables(run))
    parts.append(_gpu_table(run))
    parts.append("</details></section>")
    return "\n".join(parts)


def _ranks_summary(run: RunReport, rid: str) -> list[str]:
    """A job of many ranks summed up: the spread over the ranks, the slowest ranks, the machines, the pictures, and
    every rank's row collapsed."""
    ranks = run.ranks
    assert ranks is not None and ranks.summary is not None  # called where summarized(ranks)
    summary = ranks.summary
    return [
        f"<h3>Ranks ({esc(ranks_heading(run))})</h3>",
        page.table(SPREAD_HEADER, spread_rows(summary), cls="rank-spread"),
        f"<h3>{esc(slowest_heading(summary))}</h3>",
        page.table(
            SLOWEST_HEADER,
            slowest_rows(summary, " (slowest)"),
            ["slowest"] + [""] * (len(summary.slowest) - 1),
            cls="ranks-slowest",
        ),
        f'<p class="reason-rule">{esc(reason_rule())}.</p>',
        f'<p class="ranks-line">{esc(ranks_line(ranks, compact=True))}. The rest of this report is rank'
        f" {ranks.slowest_rank}'s: num_workers is set per rank, and the slowest sets the pace.</p>",
        page.figure(
            histogram_svg(summary, f"{rid}-histogram-title"),
            f"How many ranks waited how long for data per step (mean over each rank's recorded steps), in"
            f" {len(summary.data_wait_histogram)} bins. A rank alone far to the right is starved of data.",
        ),
        page.figure(
            heat_map_svg(summary, f"{rid}-heatmap-title"),
            f"Step time of each of the {len(summary.heat_map.ranks)} ranks (rows) in each recorded step (columns):"
            " darker is slower. A dark row is a rank slow in every step; a dark column, a step slow on every rank.",
        ),
        _nodes(summary),
        f"<details><summary>Every rank ({len(ranks.ranks)})</summary>",
        page.table(
            RANKS_HEADER,
            rank_rows(ranks, " (slowest)"),
            ["slowest" if r.rank == ranks.slowest_rank else "" for r in ranks.ranks],
            cls="ranks",
        ),
        "</details>",
    ]


def _nodes(summary) -> str:
    """The ranks by machine; collapsed when there are more machines than the text report lists."""
    table = page.table(NODES_HEADER, node_rows(summary.nodes), cls="nodes")
    heading = esc(nodes_heading(summary, len(summary.nodes)))
    if len(summary.nodes) <= NODES_SHOWN:
        return f"<h3>{heading}</h3>{table}"
    return f"<details><summary>{heading}</summary>{table}</details>"


def _throughput(run: RunReport, rid: str) -> list[str]:
    """The trials measured against the predictions (their table), and the throughput picture."""
    advice, trials = run.advice, run.trials
    parts = []
    if trials is not None:
        classes = ["chosen" if is_recommended_trial(run, r) else "" for r in trials.settings]
        parts.append(f"<h3>Measured in this training</h3><p>{esc(trials_heading(trials))}.</p>")
        parts.append(page.table(TRIALS_HEADER, trials_rows(run), classes, cls="trials"))
        if tuned := tuned_line(trials):
            parts.append(f'<p class="tuned">{esc(tuned[0].upper() + tuned[1:])}.</p>')
        if cost := tuning_cost_line(trials):
            parts.append(f"<p>{esc(cost[0].upper() + cost[1:])}.</p>")
        if trials.notes:
            parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in trials.notes) + "</ul>")
    measured = trials is not None and any(r.speed is not None for r in trials.settings)
    parts.append(f"<h3>{'Predicted and measured' if measured else 'Predicted'} throughput</h3>")
    if not measured and not any(math.isfinite(p.steps_per_s) for p in advice.predicted):
        parts.append(
            '<p class="note no-predictions">No predictions: this run does not say what a batch costs to produce '
            "(see what this rests on, above).</p>"
        )
        return parts
    basis, _, other = prediction_lines(run)
    caption = (
        f"Steps per second against num_workers. Solid: predicted {basis}, which the recommendation rests on"
        + (", the dashed line the other basis" if other else "")
        + "; predicted from this run's measurements (bound per point in the table below)."
    )
    if measured:
        caption += (
            f" Points: the settings tried in this training, measured (filled: {basis}; hollow: the other basis;"
            " squares: persistent workers), each with a bar as long as its spread over rounds."
        )
    if advice.num_workers is not None:
        caption += f" The recommended num_workers={advice.num_workers} is marked in red."
    parts.append(page.figure(predicted_svg(run, f"{rid}-predicted-title"), esc(caption)))
    if advice.predicted:
        parts.append("<details><summary>Predictions table</summary>" + _predicted_table(run) + "</details>")
    return parts


def _comparison(report: Report) -> str:
    header = ["run", "num_workers", "step ms", "steps/s", "data wait %", "input-bound", "recommended num_workers"]
    rows = []
    for i, r in enumerate(report.runs, 1):
        cells = [
            setting(r.info.num_workers),
            ms(r.steps.step.mean_ms),
            per_s(r.steps.step.mean_ms),
            f"{r.steps.data_wait_pct:.1f}",
            r.advice.verdict,
            setting(r.advice.num_workers),
        ]
        rows.append(
            f'<tr><td><a href="#run-{i}">{esc(r.info.name)}</a></td>'
            + "".join(f"<td>{esc(c)}</td>" for c in cells)
            + "</tr>"
        )
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    headlines = "".join(
        f'<li class="{_headline_class(r)}"><a href="#run-{i}">{esc(r.info.name)}</a>: {esc(headline_line(r))}</li>'
        for i, r in enumerate(report.runs, 1)
    )
    return (
        f'<h2>Runs compared</h2><ul class="headlines">{headlines}</ul><table'
        f' class="compare"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def render(report: Report) -> str:
    names = [run.info.name for run in report.runs]
    title = f"dlprof report: {names[0]}" if len(names) == 1 else f"dlprof report: {len(names)} runs"
    body = [_comparison(report)] if len(report.runs) > 1 else []
    body += [_run(run, i) for i, run in enumerate(report.runs, 1)]
    if report.skipped:
        body.append(
            "<h2>Skipped</h2><ul>" + "".join(f"<li>{esc(skipped_line(s))}</li>" for s in report.skipped) + "</ul>"
        )
    return page.document(title, report.schema, ["<h1>dlprof report</h1>", *body])
