"""Renderers of a ``dlprof sweep`` (:class:`~dlprof.results.sweep.SweepResult`): text, Markdown, JSON, HTML.

One table (measured against predicted steps/s per ``num_workers``) and one verdict line: whether the
recommendation of the first run held. They format; every number comes from the SweepResult.
:func:`dlprof.report.renderer` picks one of them.
"""

from __future__ import annotations

import json

from dlprof.report import page, svg
from dlprof.report.common import PACE_CELL, headline_class
from dlprof.report.format import NOT_APPLICABLE, fixed, rounded
from dlprof.report.json_report import headline_document
from dlprof.report.page import esc
from dlprof.report.svg import CHAR_W, CHART_LEFT, CHART_LINE, CHART_PLOT_H, CHART_RIGHT, CHART_TOP, WIDTH, coord
from dlprof.results.sweep import (
    OUTCOME_HELD,
    OUTCOME_MORE_WORKERS,
    OUTCOME_NO_RECOMMENDATION,
    OUTCOME_NOT_MEASURED,
    OUTCOME_SLOWER,
    SweepPoint,
    SweepResult,
)
from dlprof.results.trials import BASIS_WHOLE_EPOCHS, MODE_IN_PROCESS

HEADER = [
    "num_workers",
    "measured steps/s",
    "spread %",
    "predicted steps/s",
    "error %",
    "data wait %",
    "worker memory MiB",
    "run dir",
    "note",
]
#: Colours of the chart: measured (solid) and predicted (dashed) lines, the recommended count.
MEASURED_COLOUR = "#d62728"
PREDICTED_COLOUR = CHART_LINE
RECOMMENDED_COLOUR = "#2ca02c"
#: The run-dir column: left-aligned in text, code in Markdown.
RUN_DIR_COLUMN = HEADER.index("run dir")


def _notes(result: SweepResult, run: SweepPoint) -> str:
    notes = []
    if run.num_workers == result.from_run:
        notes.append(
            "advice from this run" if result.mode != MODE_IN_PROCESS else "recorded at (advice from its window)"
        )
    if run.num_workers == result.recommended:
        notes.append("recommended")
    if run.num_workers == result.best_num_workers:
        notes.append("best measured")
    if not run.unprofiled:
        notes.append("profiled steps*")
    if run.distrust:
        notes.append(f"not to be trusted: {run.distrust}")
    if run.num_workers_recorded is not None and run.num_workers_recorded != run.num_workers:
        notes.append(f"DataLoader got num_workers={run.num_workers_recorded}")
    return ", ".join(notes)


def rows(result: SweepResult) -> list[list[str]]:
    """The table's cells, one row per run in the order recorded."""
    return [
        [
            str(r.num_workers),
            f"{r.steps_per_s:.2f}",
            fixed(r.spread_pct, ".1f", NOT_APPLICABLE),
            fixed(r.shown_steps_per_s, ".2f", NOT_APPLICABLE),
            PACE_CELL if r.sets_pace else fixed(r.shown_error_pct, "+.1f", NOT_APPLICABLE),
            f"{r.data_wait_pct:.1f}",
            fixed(r.worker_pss_mib, ".1f", NOT_APPLICABLE),
            str(r.run_dir),
            _notes(result, r),
        ]
        for r in result.points
    ]


def verdict_line(result: SweepResult) -> str:
    """'dlprof recommended num_workers=N from the num_workers=M run: it held / did not hold, because ...'."""
    within, fewest_within = f"{result.within_best_pct:g} %", f"{result.fewest_within_pct:g} %"
    best = f"{result.best_steps_per_s:.2f} steps/s at num_workers={result.best_num_workers}"
    if result.outcome == OUTCOME_NO_RECOMMENDATION:
        return (
            f"dlprof made no num_workers recommendation from the num_workers={result.from_run}"
            f" {_advised_by(result)}, so there is nothing to check; the best"
            f" measured was {best}"
        )
    head = (
        f"dlprof recommended num_workers={result.recommended} from the num_workers={result.from_run} run"
        if result.mode != MODE_IN_PROCESS
        else f"dlprof's model recommended num_workers={result.recommended} from the profiled window at"
        f" num_workers={result.from_run}"
    )
    if result.outcome == OUTCOME_NOT_MEASURED:
        return (
            f"{head}: unknown whether it held, because num_workers={result.recommended} was not measured; add it to"
            " --workers"
        )
    measured = f"it measured {fixed(result.recommended_steps_per_s)} steps/s"
    if result.outcome == OUTCOME_SLOWER:
        return (
            f"{head}: it did not hold, because {measured}, {fixed(result.recommended_below_best_pct, '.1f')} %"
            f" below the best ({best})"
        )
    if result.outcome == OUTCOME_MORE_WORKERS:
        fewest = next(r for r in result.points if r.num_workers == result.fewest_near_best)
        return (
            f"{head}: it did not hold, because num_workers={fewest.num_workers} came within {fewest_within} of the best"
            f" ({best}) with fewer workers, at {fewest.steps_per_s:.2f} steps/s ({measured})"
        )
    if result.outcome == OUTCOME_HELD:
        where = (
            "the best measured"
            if result.recommended == result.best_num_workers
            else f"within {within} of the best ({best})"
        )
        return (
            f"{head}: it held, because {measured}, {where}, and no fewer workers came within {fewest_within} of the"
            " best"
        )
    return f"{head}: {result.outcome}"


def headline_lines(result: SweepResult) -> list[str]:
    """What the sweep leads with: its headline (the measured answer), when it has one."""
    return [] if result.headline is None else [result.headline.text]


def _advised_by(result: SweepResult) -> str:
    """What made the advice: the first count's profiled window (in-process trials) or its run (launches)."""
    return "window" if result.mode == MODE_IN_PROCESS else "run"


def mode_line(result: SweepResult) -> str:
    """How the counts were measured: in one launch's trials, or one launch each."""
    if result.mode == MODE_IN_PROCESS:
        return (
            f"measured: in-process trials, one launch at num_workers={result.from_run} trying every count in"
            f" {result.rounds} of {result.rounds_planned} round(s)"
        )
    return "measured: one launch per count (--launches)"


def basis_line(result: SweepResult) -> str:
    """The one basis every count is measured and predicted on."""
    if result.basis == BASIS_WHOLE_EPOCHS:
        how = "over whole epochs (the epoch boundaries, workers restarting, included)"
    else:
        how = "inside an epoch (steady steps: each pause's refill transient left out)"
    return f"basis: every count measured and predicted {how}"


def footnotes(result: SweepResult) -> list[str]:
    """What the numbers rest on."""
    if result.mode == MODE_IN_PROCESS:
        notes = [
            "measured: steps over time of each count's steady steps in its trial segments, over every round (or over"
            " whole epochs: those steps plus the count's measured restart per epoch); spread: the range of the"
            f" rounds' rates, % of it; predicted: from the profiled window at num_workers={result.from_run}"
            + (
                f", at the trials' pace (scaled so that num_workers={result.from_run}'s is what its own trials"
                " measured: see below)"
                if any(r.sets_pace for r in result.points)
                else ""
            )
            + "; error % = (predicted - measured) / measured"
        ]
        notes += list(result.notes)
    else:
        notes = [
            "measured: steps over time of the unprofiled reference steps after each run's profiler window (or of the"
            f" whole epochs timed there); spread: the range of its parts' rates, % of it; predicted: the"
            f" num_workers={result.from_run} run's prediction; error % = (predicted - measured) / measured"
        ]
    if any(not r.unprofiled for r in result.points):
        notes.append(
            "profiled steps*: too few unprofiled reference steps, so measured from the profiled steps, which the"
            " profiler slows; raise --reference-steps for the training's real speed"
        )
    if all(r.predicted_steps_per_s is None for r in result.points):
        notes.append(
            f"the num_workers={result.from_run} run predicted nothing (see 'dlprof analyze {result.points[0].run_dir}'"
            " for why)"
        )
    if result.scalars_dir is not None:
        traces = f"the trace in {result.sweep_dir}" if result.mode == MODE_IN_PROCESS else "traces in each run dir"
        notes.append(
            f"TensorBoard: tensorboard --logdir {result.sweep_dir} (scalars in {result.scalars_dir}, {traces})"
        )
    return notes


# --- text and Markdown -----------------------------------------------------------------------------


def render_text(result: SweepResult) -> str:
    table = [HEADER, *rows(result)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    line = lambda row: (
        "  "
        + "  ".join(
            c.ljust(w) if i >= RUN_DIR_COLUMN else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
        ).rstrip()
    )
    lines = [*headline_lines(result), ""] if result.headline else []
    lines += [f"dlprof sweep: {result.name}  ({result.sweep_dir})", mode_line(result), basis_line(result), ""]
    lines += [line(r) for r in table]
    lines += ["", verdict_line(result), ""]
    lines += [f"  - {n}" for n in footnotes(result)]
    return "\n".join(lines) + "\n"


def render_markdown(result: SweepResult) -> str:
    cells = [[c.replace("|", "\\|") for c in row] for row in rows(result)]
    for row in cells:
        row[RUN_DIR_COLUMN] = f"`{row[RUN_DIR_COLUMN]}`"
    lines = [f"**{line}**" for line in headline_lines(result)] + ([""] if result.headline else [])
    lines += [f"### dlprof sweep: `{result.name}`", "", f"**{verdict_line(result)}**", ""]
    lines += [mode_line(result), "", basis_line(result), ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    lines += [""] + [f"- {n}" for n in footnotes(result)]
    return "\n".join(lines) + "\n"


# --- JSON ------------------------------------------------------------------------------------------


def document(result: SweepResult) -> dict:
    """The ``dlprof.sweep/1`` document (docs/json-schemas.md documents every key)."""
    return {
        "schema": result.schema,
        "dlprof_version": result.dlprof_version,
        "headline": headline_document(result.headline),
        "name": result.name,
        "sweep_dir": str(result.sweep_dir),
        "workers": list(result.counts),
        "mode": result.mode,
        "rounds": result.rounds,
        "rounds_planned": result.rounds_planned,
        "basis": result.basis,
        "runs": [
            {
                "num_workers": r.num_workers,
                "run_dir": str(r.run_dir),
                "trace_file": str(r.trace_file),
                "steps_per_s": rounded(r.steps_per_s),
                "spread_pct": rounded(r.spread_pct, 2),
                "distrust": r.distrust,
                "measured": "unprofiled" if r.unprofiled else "profiled",
                "over_epochs": r.over_epochs,
                "data_wait_pct": rounded(r.data_wait_pct, 2),
                "worker_pss_mib": rounded(r.worker_pss_mib, 1),
                "predicted_steps_per_s": rounded(r.predicted_steps_per_s),
                "error_pct": rounded(r.error_pct, 2),
                "paced_steps_per_s": rounded(r.paced_steps_per_s),
                "paced_error_pct": rounded(r.paced_error_pct, 2),
                "sets_pace": r.sets_pace,
                "num_workers_recorded": r.num_workers_recorded,
                "profiler_overhead_pct": rounded(r.profiler_overhead_pct, 2),
            }
            for r in result.points
        ],
        "recommendation": {"num_workers": result.recommended, "from_run": result.from_run},
        "best_measured": {"num_workers": result.best_num_workers, "steps_per_s": rounded(result.best_steps_per_s)},
        "fewest_near_best": {
            "num_workers": result.fewest_near_best,
            "within_pct": rounded(result.fewest_within_pct, 2),
        },
        "held": result.held,
        "outcome": result.outcome,
        "verdict": verdict_line(result),
        "scalars_dir": None if result.scalars_dir is None else str(result.scalars_dir),
        "notes": list(result.notes),
    }


def render_json(result: SweepResult) -> str:
    return json.dumps(document(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# --- HTML ------------------------------------------------------------------------------------------


def _chart(result: SweepResult, title_id: str) -> str:
    """Measured (solid) and predicted (dashed) steps/s against num_workers; the recommended count marked."""
    runs = sorted(result.points, key=lambda r: r.num_workers)
    plot_w = WIDTH - CHART_LEFT - CHART_RIGHT
    lo_n = runs[0].num_workers
    hi_n = max(runs[-1].num_workers, lo_n + 1)
    x_of = lambda n: CHART_LEFT + (n - lo_n) / (hi_n - lo_n) * plot_w
    values = [r.steps_per_s for r in runs] + [r.shown_steps_per_s for r in runs if r.shown_steps_per_s is not None]
    ticks = svg.ticks(max(values))
    y_of = lambda v: CHART_TOP + CHART_PLOT_H - v / ticks[-1] * CHART_PLOT_H
    base = CHART_TOP + CHART_PLOT_H
    body = svg.y_axis(CHART_LEFT, plot_w, CHART_TOP, CHART_PLOT_H, ticks, y_of, "steps/s")
    for r in runs:
        x = x_of(r.num_workers)
        body.append(f'<line x1="{coord(x)}" y1="{base}" x2="{coord(x)}" y2="{base + 5}" stroke="#444"/>')
        body.append(f'<text x="{coord(x)}" y="{base + 18}" text-anchor="middle">{r.num_workers}</text>')
    body.append(f'<text x="{CHART_LEFT + plot_w / 2}" y="{base + 36}" text-anchor="middle">num_workers</text></g>')
    if result.recommended is not None and lo_n <= result.recommended <= hi_n:
        x = x_of(result.recommended)
        text = f"recommended ({result.recommended})"
        anchor, tx = ("end", x - 4) if x + 4 + len(text) * CHAR_W > WIDTH - CHART_RIGHT else ("start", x + 4)
        body.append(
            f'<g class="recommended"><line x1="{coord(x)}" y1="{CHART_TOP - 8}" x2="{coord(x)}" y2="{base}"'
            f' stroke="{RECOMMENDED_COLOUR}" stroke-dasharray="4 3"/><text x="{coord(tx)}" y="{CHART_TOP - 12}"'
            f' text-anchor="{anchor}" fill="{RECOMMENDED_COLOUR}">{esc(text)}</text></g>'
        )
    predicted = [(r, value) for r in runs if (value := r.shown_steps_per_s) is not None]
    if predicted:
        coords = " ".join(f"{coord(x_of(r.num_workers))},{coord(y_of(value))}" for r, value in predicted)
        body.append(
            f'<polyline class="predicted" points="{coords}" fill="none" stroke="{PREDICTED_COLOUR}" stroke-width="2"'
            ' stroke-dasharray="6 4"/>'
        )
        for r, value in predicted:
            body.append(
                f'<circle class="point predicted" data-num-workers="{r.num_workers}" cx="{coord(x_of(r.num_workers))}"'
                f' cy="{coord(y_of(value))}" r="4" fill="#fff" stroke="{PREDICTED_COLOUR}"'
                f' stroke-width="2"><title>num_workers={r.num_workers}: predicted {value:.2f}'
                " steps/s</title></circle>"
            )
    coords = " ".join(f"{coord(x_of(r.num_workers))},{coord(y_of(r.steps_per_s))}" for r in runs)
    body.append(
        f'<polyline class="measured" points="{coords}" fill="none" stroke="{MEASURED_COLOUR}" stroke-width="2"/>'
    )
    for r in runs:
        error = "" if r.shown_error_pct is None else f", prediction error {r.shown_error_pct:+.1f} %"
        body.append(
            f'<circle class="point measured" data-num-workers="{r.num_workers}" cx="{coord(x_of(r.num_workers))}"'
            f' cy="{coord(y_of(r.steps_per_s))}" r="5" fill="{MEASURED_COLOUR}" stroke="#fff"'
            f' stroke-width="1.5"><title>num_workers={r.num_workers}: measured {r.steps_per_s:.2f}'
            f" steps/s{esc(error)}</title></circle>"
        )
    legend, legend_h = svg.legend(
        [("measured", MEASURED_COLOUR)] + ([("predicted", PREDICTED_COLOUR)] if predicted else []),
        CHART_LEFT,
        base + 58,
        plot_w,
    )
    body += legend
    label = (
        f"Measured{' and predicted' if predicted else ''} steps per second for num_workers"
        f" {', '.join(str(r.num_workers) for r in runs)}"
    )
    return svg.picture("sweep", base + 58 + legend_h, label, title_id, body)


def render_html(result: SweepResult) -> str:
    verdict_class = "warn" if result.held is None else "good" if result.held else "bad"
    rendered_rows = rows(result)
    classes = ["chosen" if r.num_workers == result.recommended else "" for r in result.points]
    caption = (
        f"Measured steps/s (solid) against the predictions (dashed) from the num_workers={result.from_run}"
        f" {_advised_by(result)} for each swept count."
        + (
            ""
            if result.recommended is None
            else f" The recommended num_workers={result.recommended} is marked in green."
        )
    )
    body = [
        "<h1>dlprof sweep</h1>",
        f'<p class="sub">{esc(result.name)} ({esc(result.sweep_dir)})</p>',
        *[
            f'<p class="verdict headline {headline_class(result.headline)}">{esc(line)}</p>'
            for line in headline_lines(result)
        ],
        f'<p class="verdict {verdict_class}">{esc(verdict_line(result))}</p>',
        f"<p>{esc(mode_line(result))}; {esc(basis_line(result))}</p>",
        page.figure(_chart(result, "sweep-chart-title"), esc(caption)),
        page.table(HEADER, rendered_rows, classes),
        "<ul>" + "".join(f"<li>{esc(n)}</li>" for n in footnotes(result)) + "</ul>",
    ]
    return page.document(f"dlprof sweep: {result.name}", result.schema, body)
