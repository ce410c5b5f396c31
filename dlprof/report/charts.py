"""The HTML report's charts, each an inline ``<svg role="img">`` with a ``data-picture`` attribute: the timeline of a
few steps, the per-step breakdown and the predicted (and measured) throughput against num_workers.

Scaling to pixels, colours and merging what is narrower than a pixel are drawing decisions made here; every number
drawn comes from the Report. ``html.py`` assembles the page around them.
"""

from __future__ import annotations

import math

from dlprof.report import svg
from dlprof.report.common import CATEGORY_LABELS, is_recommended_trial
from dlprof.report.format import finite
from dlprof.report.page import esc
from dlprof.report.svg import CHAR_W, CHART_LEFT, CHART_LINE, CHART_PLOT_H, CHART_RIGHT, CHART_TOP, WIDTH, coord
from dlprof.results.advice import RESTS_ON_MEASURED, Prediction
from dlprof.results.analysis import CATEGORIES
from dlprof.results.report import RunReport, TimelinePicture
from dlprof.results.trials import BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS, TrialSetting, setting_label

#: Colours per bar kind: step categories, loader spans, the GPU. Data wait is the loud one.
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


def _by_depth(bars: list[tuple[str, float, float]]) -> list[list[tuple[str, float, float]]]:
    """Bars grouped by nesting depth (loader spans nest: tokenizer calls inside a dataset fetch)."""
    levels: list[list[tuple[str, float, float]]] = []
    open_ends: list[float] = []
    for bar in sorted(bars, key=lambda s: (s[1], -s[2])):
        while open_ends and open_ends[-1] <= bar[1]:
            open_ends.pop()
        depth = min(len(open_ends), TL_MAX_DEPTH)
        while len(levels) <= depth:
            levels.append([])
        levels[depth].append(bar)
        open_ends.append(bar[2])
    return levels


def _lane_rects(bars: list[tuple[str, float, float]], scale: float, columns: int) -> list[list]:
    """Bin one depth of a lane into one-unit columns, then run-length encode them into rectangles.

    Each column takes the kind covering most of it and an opacity from how much of it is covered, so
    thousands of sub-pixel bars become at most ``columns`` rectangles (usually far fewer).
    """
    cover: list[dict[str, float] | None] = [None] * columns
    for kind, start_ms, end_ms in bars:
        a, b = max(0.0, start_ms * scale), min(float(columns), end_ms * scale)
        c = int(a)
        while c < b and c < columns:
            part = min(b, c + 1) - max(a, c)
            if part > 0:
                column = cover[c] or {}
                column[kind] = column.get(kind, 0.0) + part
                cover[c] = column
            c += 1
    rects: list[list] = []  # [kind, first column, end column, opacity]
    for c, kinds in enumerate(cover):
        if not kinds:
            continue
        kind = max(kinds, key=kinds.__getitem__)
        opacity = max(1, round(min(1.0, sum(kinds.values())) * TL_COVERAGE_LEVELS)) / TL_COVERAGE_LEVELS
        last = rects[-1] if rects else None
        if last and last[0] == kind and last[2] == c and last[3] == opacity:
            last[2] = c + 1
        else:
            rects.append([kind, c, c + 1, opacity])
    return rects


def timeline_svg(picture: TimelinePicture, title_id: str) -> str:
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
        for depth, level in enumerate(_by_depth(lane.bars)):
            inset = depth * TL_INSET
            for kind, c0, c1, opacity in _lane_rects(level, scale, plot_w):
                fade = "" if opacity == 1 else f' fill-opacity="{opacity:g}"'
                body.append(
                    f'<rect x="{TL_LEFT + c0}" y="{y + inset}" width="{c1 - c0}" height="{TL_LANE_H - 2 * inset}" '
                    f'fill="{_colour(kind, spare)}"{fade}/>'
                )
        body.append("</g>")
        for kind, _, _ in lane.bars:
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


def breakdown_svg(run: RunReport, title_id: str) -> str:
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


def prediction_lines(
    run: RunReport,
) -> tuple[str, list[tuple[int, float, Prediction]], list[tuple[int, float, Prediction]]]:
    """The basis the recommendation compared on, the predictions on it (the main line), and on the other basis."""
    predicted = run.advice.predicted
    steady = [(p.num_workers, speed, p) for p in predicted if (speed := finite(p.steps_per_s)) is not None]
    epochs = [(p.num_workers, speed, p) for p in predicted if (speed := finite(p.epoch_steps_per_s)) is not None]
    compared = run.advice.compared_on or (run.trials.basis if run.trials else BASIS_IN_EPOCH)
    if compared == BASIS_WHOLE_EPOCHS and (epochs or not steady):
        return BASIS_WHOLE_EPOCHS, epochs, steady
    return BASIS_IN_EPOCH, steady, epochs


def _measured(run: RunReport) -> list[tuple[TrialSetting, float, float, str]]:
    """Each tried setting's measured speeds to draw: (run, steps/s, spread %, basis), over whole epochs and inside an
    epoch."""
    found: list[tuple[TrialSetting, float, float, str]] = []
    for trial in run.trials.settings if run.trials else ():
        spread = trial.speed.spread_pct if trial.speed else 0.0
        for value, basis in ((trial.epoch_steps_per_s, BASIS_WHOLE_EPOCHS), (trial.steps_per_s, BASIS_IN_EPOCH)):
            if (known := finite(value)) is not None:
                found.append((trial, known, spread, basis))
    return found


def _trial_marks(measured: list[tuple[TrialSetting, float, float, str]], basis: str, x_of, y_of) -> list[str]:
    """The measured settings: a point per speed (filled on ``basis``, hollow on the other; a square for persistent
    workers) with a bar as long as its spread over rounds, centred on it."""
    body = []
    for trial, value, spread, on in measured:
        x = x_of(trial.num_workers) + (PR_TRIAL_SHIFT if trial.persistent_workers else -PR_TRIAL_SHIFT)
        y = y_of(value)
        half = value * spread / 200
        fill = PR_MEASURED if on == basis else "#fff"
        title = (
            f"{setting_label(trial.num_workers, trial.persistent_workers)}: measured"
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


def predicted_svg(run: RunReport, title_id: str) -> str:
    """Predicted steps/s against num_workers on both bases (the one the recommendation rests on solid, the other
    dashed), and the settings the trials measured, with their spread."""
    advice = run.advice
    basis, main, other = prediction_lines(run)
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
    tried = next((t for t in run.trials.settings if is_recommended_trial(run, t)), None) if run.trials else None
    value = run.trials.measured(tried) if run.trials and tried is not None else None
    if advice.rests_on == RESTS_ON_MEASURED and tried is not None and value is not None:
        # The recommendation rests on this measured point: ring it, and say so.
        shift = PR_TRIAL_SHIFT if tried.persistent_workers else -PR_TRIAL_SHIFT
        x, y = x_of(tried.num_workers) + shift, y_of(value)
        body.append(
            f'<circle class="recommended-ring" cx="{coord(x)}" cy="{coord(y)}" r="9" fill="none" stroke="{PR_CHOSEN}"'
            ' stroke-width="2"/>'
        )
        text = f"recommended: {setting_label(tried.num_workers, tried.persistent_workers)}, measured {value:.2f}"
        text += f" steps/s {basis}"
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
        + (f", and {len(run.trials.settings)} settings measured in this training" if measured and run.trials else "")
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
