"""HTML renderer: one self-contained page (inline CSS and SVG, no scripts, nothing fetched).

Per run: the verdict, the run's facts, the recommendation with its evidence, and three pictures
(timeline, per-step breakdown, predicted throughput), then the tables behind them. Every picture is
an inline ``<svg role="img">`` with a ``data-picture`` attribute, so a test or a reader can find it.
Scaling to pixels, colours and merging what is narrower than a pixel are drawing decisions made
here; every number drawn comes from the Report.
"""

from __future__ import annotations

import math

from dlprof.report import page, svg
from dlprof.report.common import (
    CATEGORY_LABELS,
    NODES_HEADER,
    NODES_SHOWN,
    PREDICTED_HEADER,
    RANKS_HEADER,
    SLOWEST_HEADER,
    SPREAD_HEADER,
    TRIALS_HEADER,
    breakdown_rows,
    epoch_line,
    is_recommended_trial,
    known,
    loader_rows,
    missing_ranks_line,
    node_rows,
    nodes_heading,
    page_faults_line,
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
    unprofiled_line,
    verdict_line,
)
from dlprof.report.format import finite, ms, per_s
from dlprof.report.page import esc
from dlprof.report.rank_pictures import heat_map_svg, histogram_svg
from dlprof.report.svg import CHAR_W, CHART_LEFT, CHART_LINE, CHART_PLOT_H, CHART_RIGHT, CHART_TOP, WIDTH, coord
from dlprof.results.advice import RESTS_ON_MEASURED, Prediction
from dlprof.results.analysis import CATEGORIES
from dlprof.results.report import Report, RunReport, TimelinePicture
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, TrialRun

#: Colours per segment kind: step categories, loader spans, the GPU. Data wait is the loud one.
COLOURS = {
    "data_wait": "#d62728",
    "h2d": "#9467bd",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "other": "#b8b8b8",
    "dataset fetch": "#17becf",
    "tokenizer": "#a6a200",
    "collate_fn": "#8c564b",
    "gpu": "#3a7d44",
}
#: For kinds a newer trace may bring that this renderer does not know yet.
SPARE_COLOURS = ("#e377c2", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a")
KIND_LABELS = {**CATEGORY_LABELS, "gpu": "GPU busy"}
VERDICT_CLASS = {"HIGHLY": "bad", "MODERATELY": "warn", "NOT": "good"}


def _colour(kind: str, spare: dict[str, str]) -> str:
    if kind in COLOURS:
        return COLOURS[kind]
    return spare.setdefault(kind, SPARE_COLOURS[len(spare) % len(SPARE_COLOURS)])


# --- (a) timeline ----------------------------------------------------------------------------------

TL_LEFT = 164  # room for lane labels
TL_RIGHT = 16
TL_LANE_H = 22
TL_LANE_GAP = 8
#: Coverage of a one-unit column is drawn in quarters of opacity: a sparse lane looks sparse.
TL_COVERAGE_LEVELS = 4
#: A nested span is drawn inset by this much per level inside its parent, up to TL_MAX_DEPTH levels.
TL_INSET = 5
TL_MAX_DEPTH = 2
#: Longer lane labels are cut (the full label stays in the lane's tooltip).
TL_LABEL_CHARS = 22


def _by_depth(segments: list[tuple[str, float, float]]) -> list[list[tuple[str, float, float]]]:
    """Segments grouped by nesting depth (loader spans nest: tokenizer calls inside a dataset fetch)."""
    levels: list[list[tuple[str, float, float]]] = []
    open_ends: list[float] = []
    for segment in sorted(segments, key=lambda s: (s[1], -s[2])):
        while open_ends and open_ends[-1] <= segment[1]:
            open_ends.pop()
        depth = min(len(open_ends), TL_MAX_DEPTH)
        while len(levels) <= depth:
            levels.append([])
        levels[depth].append(segment)
        open_ends.append(segment[2])
    return levels


def _lane_rects(segments: list[tuple[str, float, float]], scale: float, columns: int) -> list[list]:
    """Bin one depth of a lane into one-unit columns, then run-length encode them into rectangles.

    Each column takes the kind covering most of it and an opacity from how much of it is covered, so
    thousands of sub-pixel segments become at most ``columns`` rectangles (usually far fewer).
    """
    cover: list[dict[str, float] | None] = [None] * columns
    for kind, start_ms, end_ms in segments:
        a, b = max(0.0, start_ms * scale), min(float(columns), end_ms * scale)
        c = int(a)
        while c < b and c < columns:
            part = min(b, c + 1) - max(a, c)
            if part > 0:
                column = cover[c] if cover[c] is not None else {}
                column[kind] = column.get(kind, 0.0) + part
                cover[c] = column
            c += 1
    rects: list[list] = []  # [kind, first column, end column, opacity]
    for c, kinds in enumerate(cover):
        if not kinds:
            continue
        kind = max(kinds, key=kinds.get)
        opacity = max(1, round(min(1.0, sum(kinds.values())) * TL_COVERAGE_LEVELS)) / TL_COVERAGE_LEVELS
        last = rects[-1] if rects else None
        if last and last[0] == kind and last[2] == c and last[3] == opacity:
            last[2] = c + 1
        else:
            rects.append([kind, c, c + 1, opacity])
    return rects


def _timeline_svg(picture: TimelinePicture, title_id: str) -> str:
    plot_w = WIDTH - TL_LEFT - TL_RIGHT
    duration = picture.duration_ms if picture.duration_ms > 0 else 1.0
    scale = plot_w / duration
    top = 8
    lanes_h = len(picture.lanes) * (TL_LANE_H + TL_LANE_GAP) - TL_LANE_GAP
    spare: dict[str, str] = {}
    body: list[str] = []
    kinds_seen: list[str] = []
    for i, lane in enumerate(picture.lanes):
        y = top + i * (TL_LANE_H + TL_LANE_GAP)
        body.append(f'<g class="lane" data-lane="{esc(lane.label)}">')
        body.append(f'<rect x="{TL_LEFT}" y="{y}" width="{plot_w}" height="{TL_LANE_H}" fill="#f3f4f6"/>')
        short = lane.label if len(lane.label) <= TL_LABEL_CHARS else lane.label[: TL_LABEL_CHARS - 1] + "\u2026"
        body.append(
            f'<text class="lane-label" x="{TL_LEFT - 8}" y="{coord(y + TL_LANE_H / 2 + 4)}" text-anchor="end">'
            f"<title>{esc(lane.label)}</title>{esc(short)}</text>"
        )
        for depth, level in enumerate(_by_depth(lane.segments)):
            inset = depth * TL_INSET
            for kind, c0, c1, opacity in _lane_rects(level, scale, plot_w):
                fade = "" if opacity == 1 else f' fill-opacity="{opacity:g}"'
                body.append(
                    f'<rect x="{TL_LEFT + c0}" y="{y + inset}" width="{c1 - c0}" height="{TL_LANE_H - 2 * inset}" '
                    f'fill="{_colour(kind, spare)}"{fade}/>'
                )
        body.append("</g>")
        for kind, _, _ in lane.segments:
            if kind not in kinds_seen:
                kinds_seen.append(kind)
    # Step boundaries over all lanes, and the end of the last step.
    bottom = top + lanes_h
    for start in [*picture.step_starts_ms, picture.duration_ms]:
        x = TL_LEFT + start * scale
        body.append(
            f'<line class="step-boundary" x1="{coord(x)}" y1="{top - 4}" x2="{coord(x)}" y2="{bottom + 4}" '
            'stroke="#222" stroke-width="1.2" stroke-dasharray="4 3"/>'
        )
    # Time axis.
    axis_y = bottom + 10
    body.append(
        f'<g class="axis"><line x1="{TL_LEFT}" y1="{axis_y}" x2="{TL_LEFT + plot_w}" y2="{axis_y}" stroke="#444"/>'
    )
    ticks = [t for t in svg.ticks(picture.duration_ms, 8) if t <= picture.duration_ms + 1e-9]
    for t in ticks:
        x = TL_LEFT + t * scale
        body.append(f'<line x1="{coord(x)}" y1="{axis_y}" x2="{coord(x)}" y2="{axis_y + 5}" stroke="#444"/>')
        body.append(f'<text x="{coord(x)}" y="{axis_y + 18}" text-anchor="middle">{svg.tick_label(t, ticks)}</text>')
    body.append(f'<text x="{TL_LEFT - 8}" y="{axis_y + 18}" text-anchor="end">time (ms)</text></g>')
    # Known kinds in a fixed order (categories, loader spans, GPU), then any others as met.
    order = [k for k in COLOURS if k in kinds_seen] + [k for k in kinds_seen if k not in COLOURS]
    legend, legend_h = svg.legend(
        [(KIND_LABELS.get(k, k), _colour(k, spare)) for k in order], TL_LEFT, axis_y + 40, plot_w, "step boundary"
    )
    body += legend
    height = axis_y + 40 + legend_h
    label = f"Timeline of {len(picture.step_starts_ms)} consecutive steps ({picture.duration_ms:.1f} ms): " + ", ".join(
        lane.label for lane in picture.lanes
    )
    return svg.picture("timeline", height, label, title_id, body)


# --- (b) per-step breakdown ------------------------------------------------------------------------

BD_LEFT = 64
BD_RIGHT = 16
BD_TOP = 12
BD_PLOT_H = 240
BD_MAX_BAR_W = 48


def _breakdown_svg(run: RunReport, title_id: str) -> str:
    steps = run.steps.steps
    plot_w = WIDTH - BD_LEFT - BD_RIGHT
    ticks = svg.ticks(max((sum(s.category_ms(c) for c in CATEGORIES) for s in steps), default=1.0))
    y_max = ticks[-1]
    y_of = lambda v: BD_TOP + BD_PLOT_H - v / y_max * BD_PLOT_H
    base = BD_TOP + BD_PLOT_H
    body = svg.y_axis(BD_LEFT, plot_w, BD_TOP, BD_PLOT_H, ticks, y_of, "ms per step")
    body[-1] += "</g>"
    slot = plot_w / max(1, len(steps))
    bar_w = min(BD_MAX_BAR_W, slot * 0.7)
    label_every = max(1, math.ceil(len(steps) * 28 / plot_w))  # keep step numbers from overlapping
    for i, step in enumerate(steps):
        x = BD_LEFT + i * slot + (slot - bar_w) / 2
        parts = ", ".join(f"{CATEGORY_LABELS[c]} {step.category_ms(c):.2f}" for c in CATEGORIES)
        body.append(
            f'<g class="bar" data-step="{step.number}"><title>step {step.number}: {step.step_ms:.2f} ms'
            f" ({esc(parts)})</title>"
        )
        stacked = 0.0
        for c in CATEGORIES:
            value = step.category_ms(c)
            if value <= 0:
                continue
            y1, y0 = y_of(stacked + value), y_of(stacked)
            body.append(
                f'<rect x="{coord(x)}" y="{coord(y1)}" width="{coord(bar_w)}" height="{coord(y0 - y1)}"'
                f' fill="{COLOURS[c]}" data-category="{c}"/>'
            )
            stacked += value
        if i % label_every == 0:
            body.append(f'<text x="{coord(x + bar_w / 2)}" y="{base + 16}" text-anchor="middle">{step.number}</text>')
        body.append("</g>")
    body.append(
        f'<text x="{BD_LEFT + plot_w / 2}" y="{base + 34}" text-anchor="middle">step (ProfilerStep number)</text>'
    )
    legend, legend_h = svg.legend([(CATEGORY_LABELS[c], COLOURS[c]) for c in CATEGORIES], BD_LEFT, base + 58, plot_w)
    body += legend
    label = f"Time per step by category for {len(steps)} steps, stacked from data wait at the bottom"
    return svg.picture("breakdown", base + 58 + legend_h, label, title_id, body)


# --- (c) predicted throughput ----------------------------------------------------------------------

PR_CHOSEN = "#d62728"
#: The line of predictions the recommendation does not rest on: lighter, dashed.
PR_OTHER = "#9cbcdc"
#: The settings measured by the trials: points with bars of their spread.
PR_MEASURED = "#ff7f0e"
#: Measured points are drawn this far beside their count (SVG units): persistent settings right, the others left, so
#: that they and the prediction at that count all show.
PR_TRIAL_SHIFT = 6


def _lines(run: RunReport) -> tuple[str, list[tuple[int, float, Prediction]], list[tuple[int, float, Prediction]]]:
    """The basis the recommendation compared on, the predictions on it (the main line), and on the other basis."""
    predicted = run.advice.predicted
    steady = [(p.num_workers, p.steps_per_s, p) for p in predicted if finite(p.steps_per_s) is not None]
    epochs = [(p.num_workers, p.epoch_steps_per_s, p) for p in predicted if finite(p.epoch_steps_per_s) is not None]
    compared = run.advice.compared_on or (run.trials.basis if run.trials else BASIS_IN_EPOCH)
    if compared == BASIS_WHOLE_EPOCHS and (epochs or not steady):
        return BASIS_WHOLE_EPOCHS, epochs, steady
    return BASIS_IN_EPOCH, steady, epochs


def _measured(run: RunReport) -> list[tuple[TrialRun, float, float, str]]:
    """Each tried setting's measured speeds to draw: (run, steps/s, spread %, basis), over whole epochs and inside an
    epoch."""
    found = []
    for trial in run.trials.runs if run.trials else ():
        spread = trial.speed.spread_pct if trial.speed else 0.0
        for value, basis in ((trial.epoch_steps_per_s, BASIS_WHOLE_EPOCHS), (trial.steps_per_s, BASIS_IN_EPOCH)):
            if finite(value) is not None:
                found.append((trial, value, spread, basis))
    return found


def _trial_marks(measured: list[tuple[TrialRun, float, float, str]], basis: str, x_of, y_of) -> list[str]:
    """The measured settings: a point per speed (filled on ``basis``, hollow on the other; a square for persistent
    workers) with a bar as long as its spread over rounds, centred on it."""
    body = []
    for trial, value, spread, on in measured:
        x = x_of(trial.num_workers) + (PR_TRIAL_SHIFT if trial.persistent_workers else -PR_TRIAL_SHIFT)
        y = y_of(value)
        half = value * spread / 200
        fill = PR_MEASURED if on == basis else "#fff"
        title = (
            f"num_workers={trial.num_workers}{' (persistent)' if trial.persistent_workers else ''}: measured"
            f" {value:.2f} steps/s {on}, spread {spread:.1f} % over rounds"
        )
        if trial.persistent_workers:
            mark = f'<rect class="trial-point" x="{coord(x - 4)}" y="{coord(y - 4)}" width="8" height="8"'
        else:
            mark = f'<circle class="trial-point" cx="{coord(x)}" cy="{coord(y)}" r="4.5"'
        body.append(
            f'<g class="trial" data-num-workers="{trial.num_workers}"'
            f' data-persistent="{str(trial.persistent_workers).lower()}" data-basis="{esc(on)}">'
            f"<title>{esc(title)}</title>"
            + svg.error_bar(x, y_of(max(0.0, value - half)), y_of(value + half), PR_MEASURED)
            + f'{mark} fill="{fill}" stroke="{PR_MEASURED}" stroke-width="2"/></g>'
        )
    return body


def _predicted_svg(run: RunReport, title_id: str) -> str:
    """Predicted steps/s against num_workers on both bases (the one the recommendation rests on solid, the other
    dashed), and the settings the trials measured, with their spread."""
    advice = run.advice
    basis, main, other = _lines(run)
    measured = _measured(run)
    plot_w = WIDTH - CHART_LEFT - CHART_RIGHT
    counts = [n for n, _, _ in main + other] + [t.num_workers for t, _, _, _ in measured]
    lo_n, hi_n = min(counts), max(max(counts), min(counts) + 1)
    x_of = lambda n: CHART_LEFT + (n - lo_n) / (hi_n - lo_n) * plot_w
    tops = [v for _, v, _ in main + other] + [v * (1 + s / 200) for _, v, s, _ in measured]
    ticks = svg.ticks(max(tops))
    y_of = lambda v: CHART_TOP + CHART_PLOT_H - v / ticks[-1] * CHART_PLOT_H
    base = CHART_TOP + CHART_PLOT_H
    body = svg.y_axis(CHART_LEFT, plot_w, CHART_TOP, CHART_PLOT_H, ticks, y_of, "steps/s")
    body += svg.count_axis(lo_n, hi_n, x_of, base, CHART_LEFT, plot_w)
    recorded = run.info.num_workers
    if recorded is not None and lo_n <= recorded <= hi_n:
        x = x_of(recorded)
        body.append(
            f'<g class="recorded"><line x1="{coord(x)}" y1="{CHART_TOP - 8}" x2="{coord(x)}" y2="{base}" stroke="#666"'
            f' stroke-dasharray="4 3"/><text x="{coord(x + 4)}" y="{CHART_TOP - 12}" fill="#555">as recorded'
            f" ({recorded})</text></g>"
        )
    if other:
        body.append(
            svg.polyline([(x_of(n), y_of(v)) for n, v, _ in other], PR_OTHER, "predicted other-basis", 1.5, True)
        )
    if main:
        body.append(svg.polyline([(x_of(n), y_of(v)) for n, v, _ in main], CHART_LINE, "predicted basis", 2.5))
    chosen = None
    for n, v, p in main:
        is_chosen = n == advice.num_workers
        chosen = (n, v) if is_chosen else chosen
        radius, fill, cls = (7, PR_CHOSEN, "point recommended") if is_chosen else (4, CHART_LINE, "point")
        body.append(
            f'<circle class="{cls}" data-num-workers="{n}" cx="{coord(x_of(n))}" cy="{coord(y_of(v))}" r="{radius}"'
            f' fill="{fill}" stroke="#fff" stroke-width="1.5"><title>num_workers={n}: predicted {v:.2f} steps/s'
            f" {basis} ({p.step_ms:.2f} ms/step inside an epoch, bound by {esc(p.bound)})</title></circle>"
        )
    body += _trial_marks(measured, basis, x_of, y_of)
    tried = next((t for t in run.trials.runs if is_recommended_trial(run, t)), None) if run.trials else None
    value = run.trials.measured(tried) if tried is not None else None
    if advice.rests_on == RESTS_ON_MEASURED and value is not None:
        # The recommendation rests on this measured point: ring it, and say so.
        shift = PR_TRIAL_SHIFT if tried.persistent_workers else -PR_TRIAL_SHIFT
        x, y = x_of(tried.num_workers) + shift, y_of(value)
        body.append(
            f'<circle class="recommended-ring" cx="{coord(x)}" cy="{coord(y)}" r="9" fill="none" stroke="{PR_CHOSEN}"'
            ' stroke-width="2"/>'
        )
        persistent = " (persistent)" if tried.persistent_workers else ""
        text = f"recommended: num_workers={tried.num_workers}{persistent}, measured {value:.2f} steps/s {basis}"
        body.append(_recommended_label(text, x, y))
    elif chosen is not None:
        text = f"recommended: num_workers={chosen[0]}, predicted {chosen[1]:.2f} steps/s {basis}"
        body.append(_recommended_label(text, x_of(chosen[0]), y_of(chosen[1])))
    other_basis = BASIS_IN_EPOCH if basis == BASIS_WHOLE_EPOCHS else BASIS_WHOLE_EPOCHS
    items = [(f"predicted {basis}: the basis the recommendation compares on", CHART_LINE)]
    if other:
        items.append((f"predicted {other_basis}", PR_OTHER))
    if measured:
        items.append((f"measured in this training (filled: {basis}), bar: spread; square: persistent", PR_MEASURED))
    legend, legend_h = svg.legend(items, CHART_LEFT, base + 58, plot_w)
    body += legend
    label = (
        f"Predicted steps per second {basis} for num_workers {lo_n} to {max(counts)}"
        + (f", and {len(run.trials.runs)} settings measured in this training" if measured else "")
        + (f"; recommended num_workers={advice.num_workers}" if advice.num_workers is not None else "")
    )
    return svg.picture("predicted", base + 58 + legend_h, label, title_id, body)


def _recommended_label(text: str, x: float, y: float) -> str:
    """``text`` beside the recommended point at (``x``, ``y``), inside the plot."""
    right = x + 12 + len(text) * CHAR_W > WIDTH - CHART_RIGHT
    anchor, tx = ("end", x - 12) if right else ("start", x + 12)
    ty = y + 20 if y < CHART_TOP + 16 else y - 10  # keep the label inside the plot
    return (
        f'<text class="recommended-label" x="{coord(tx)}" y="{coord(ty)}" text-anchor="{anchor}" fill="{PR_CHOSEN}"'
        f' font-weight="600">{esc(text)}</text>'
    )


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


# --- page ------------------------------------------------------------------------------------------


def _run(run: RunReport, index: int) -> str:
    info, advice = run.info, run.advice
    rid = f"run-{index}"
    parts = [
        f'<section class="run" id="{rid}">',
        f"<h2>Run: {esc(info.name)}</h2>",
        f'<p class="sub">{esc(info.trace_file)}</p>',
    ]
    if info.incomplete:
        parts.append(f'<p class="note">Note: the recording is {esc(info.status)}.</p>')
    if missing := missing_ranks_line(run):
        parts.append(f'<p class="note missing-ranks">Note: {esc(missing)}.</p>')
    parts.append(f'<p class="verdict {VERDICT_CLASS.get(advice.verdict, "warn")}">{esc(verdict_line(run))}</p>')
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
            _timeline_svg(tl, f"{rid}-timeline-title"),
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
            _breakdown_svg(run, f"{rid}-breakdown-title"),
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
        classes = ["chosen" if is_recommended_trial(run, r) else "" for r in trials.runs]
        parts.append(f"<h3>Measured in this training</h3><p>{esc(trials_heading(trials))}.</p>")
        parts.append(page.table(TRIALS_HEADER, trials_rows(run), classes, cls="trials"))
        if trials.notes:
            parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in trials.notes) + "</ul>")
    measured = trials is not None and any(r.speed is not None for r in trials.runs)
    parts.append(f"<h3>{'Predicted and measured' if measured else 'Predicted'} throughput</h3>")
    if not measured and not any(math.isfinite(p.steps_per_s) for p in advice.predicted):
        parts.append(
            '<p class="note no-predictions">No predictions: this run does not say what a batch costs to produce '
            "(see what this rests on, above).</p>"
        )
        return parts
    basis, _, other = _lines(run)
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
    parts.append(page.figure(_predicted_svg(run, f"{rid}-predicted-title"), esc(caption)))
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
    return (
        "<h2>Runs compared</h2><table"
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
