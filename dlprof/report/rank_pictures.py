"""The pictures of a job of many ranks in the HTML report: a histogram of data wait per rank, and a heat map of step
time per rank and step.

Both are drawn from ``JobSummary`` (the bins and the cells are the analysis's); scaling to pixels, colours and which
labels fit are decided here.
"""

from __future__ import annotations

import math

from dlprof.report import svg
from dlprof.report.common import rank_set
from dlprof.report.page import esc
from dlprof.report.svg import CHART_LEFT, CHART_RIGHT, CHART_TOP, WIDTH, coord
from dlprof.results.analysis import JobSummary

#: The histogram's bars (data wait is the loud colour of every picture) and plot height.
HIST_COLOUR = "#d62728"
HIST_PLOT_H = 200
#: Heat map: room for rank labels, each row's height (shrunk to fit the plot's height for many ranks, down to the
#: minimum), the colour of a cell a rank did not record.
HM_LEFT = 72
HM_ROW_H = 14
HM_MIN_ROW_H = 2
HM_PLOT_H = 640
HM_MISSING = "#e3e6ea"
#: A row label needs about this much height; with thinner rows only every few ranks are labelled.
HM_LABEL_H = 13
#: Step time from fastest to slowest: light to dark (ColorBrewer's sequential Oranges), one colour per equal share of
#: the range.
HM_PALETTE = ("#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#e6550d", "#a63603")


def histogram_svg(summary: JobSummary, title_id: str) -> str:
    """The ranks by their mean data wait per step: one bar per bin, as high as its number of ranks."""
    bins = summary.data_wait_histogram
    ranks = sum(len(b.ranks) for b in bins)
    plot_w = WIDTH - CHART_LEFT - CHART_RIGHT
    top_count = max(len(b.ranks) for b in bins)
    ticks = svg.ticks(top_count, min(5, top_count))
    y_of = lambda v: CHART_TOP + HIST_PLOT_H - v / ticks[-1] * HIST_PLOT_H
    base = CHART_TOP + HIST_PLOT_H
    body = svg.y_axis(CHART_LEFT, plot_w, CHART_TOP, HIST_PLOT_H, ticks, y_of, "ranks")
    body[-1] += "</g>"
    labels = ['<g class="axis">']
    slot = plot_w / len(bins)
    every = max(1, math.ceil((len(bins) + 1) * 48 / plot_w))  # keep the edge labels from overlapping
    for i, b in enumerate(bins):
        x = CHART_LEFT + i * slot
        if i % every == 0:
            labels.append(f'<line x1="{coord(x)}" y1="{base}" x2="{coord(x)}" y2="{base + 5}" stroke="#444"/>')
            labels.append(f'<text x="{coord(x)}" y="{base + 18}" text-anchor="middle">{b.lo_ms:.2f}</text>')
        who = f" ({rank_set(b.ranks)})" if b.ranks else ""
        body.append(
            f'<g class="bin" data-ranks="{len(b.ranks)}"><title>data wait {b.lo_ms:.2f}-{b.hi_ms:.2f} ms per step:'
            f" {len(b.ranks)} rank{'s' if len(b.ranks) != 1 else ''}{esc(who)}</title>"
        )
        if b.ranks:
            y = y_of(len(b.ranks))
            body.append(
                f'<rect x="{coord(x + slot * 0.05)}" y="{coord(y)}" width="{coord(slot * 0.9)}"'
                f' height="{coord(base - y)}" fill="{HIST_COLOUR}"/>'
            )
        body.append("</g>")
    end = CHART_LEFT + plot_w
    labels.append(f'<text x="{coord(end)}" y="{base + 18}" text-anchor="end">{bins[-1].hi_ms:.2f}</text>')
    labels.append(
        f'<text x="{coord(CHART_LEFT + plot_w / 2)}" y="{base + 36}" text-anchor="middle">data wait, ms per step'
        "</text></g>"
    )
    body += labels
    label = (
        f"Histogram of data wait per step over {ranks} ranks, in {len(bins)} bins from {bins[0].lo_ms:.2f} to"
        f" {bins[-1].hi_ms:.2f} ms; the most in one bin: {top_count}"
    )
    return svg.picture("histogram", base + 48, label, title_id, body)


def _level(value: float, lo: float, hi: float) -> int:
    """The palette colour of a step time: its share of the range lo..hi, in equal parts."""
    if hi <= lo:
        return 0
    return min(len(HM_PALETTE) - 1, int((value - lo) / (hi - lo) * len(HM_PALETTE)))


def heat_map_svg(summary: JobSummary, title_id: str) -> str:
    """Ranks (rows) by profiled steps (columns), each cell coloured by that rank's step time in that step."""
    heat = summary.heat_map
    rows, columns = len(heat.ranks), len(heat.steps)
    row_h = max(HM_MIN_ROW_H, min(HM_ROW_H, HM_PLOT_H / max(1, rows)))
    plot_w = WIDTH - HM_LEFT - CHART_RIGHT
    col_w = plot_w / max(1, columns)
    top = 8
    body = ['<g class="cells">']
    label_every = max(1, math.ceil(HM_LABEL_H / row_h))
    for i, (rank, cells) in enumerate(zip(heat.ranks, heat.step_ms)):
        y = top + i * row_h
        if i % label_every == 0:
            body.append(f'<text x="{HM_LEFT - 6}" y="{coord(y + row_h / 2 + 4)}" text-anchor="end">{rank}</text>')
        for j, (step, value) in enumerate(zip(heat.steps, cells)):
            fill = HM_MISSING if value is None else HM_PALETTE[_level(value, heat.lo_ms, heat.hi_ms)]
            what = "not recorded" if value is None else f"{value:.2f} ms"
            body.append(
                f'<rect class="cell" data-rank="{rank}" data-step="{step}" x="{coord(HM_LEFT + j * col_w)}"'
                f' y="{coord(y)}" width="{coord(col_w)}" height="{coord(row_h)}" fill="{fill}">'
                f"<title>rank {rank}, step {step}: {what}</title></rect>"
            )
    body.append("</g>")
    base = top + rows * row_h
    body.append('<g class="axis">')
    step_every = max(1, math.ceil(columns * 28 / plot_w))
    for j, step in enumerate(heat.steps):
        if j % step_every == 0:
            x = HM_LEFT + (j + 0.5) * col_w
            body.append(f'<text x="{coord(x)}" y="{coord(base + 16)}" text-anchor="middle">{step}</text>')
    body.append(
        f'<text x="{coord(HM_LEFT + plot_w / 2)}" y="{coord(base + 34)}" text-anchor="middle">'
        "step (ProfilerStep number)</text>"
    )
    mid = top + rows * row_h / 2
    body.append(
        f'<text x="14" y="{coord(mid)}" text-anchor="middle" transform="rotate(-90 14 {coord(mid)})">rank</text></g>'
    )
    span = (heat.hi_ms - heat.lo_ms) / len(HM_PALETTE)
    items = (
        [
            (f"{heat.lo_ms + k * span:.2f}-{heat.lo_ms + (k + 1) * span:.2f} ms", colour)
            for k, colour in enumerate(HM_PALETTE)
        ]
        if span > 0
        else [(f"{heat.lo_ms:.2f} ms", HM_PALETTE[0])]
    )
    if any(v is None for cells in heat.step_ms for v in cells):
        items.append(("not recorded", HM_MISSING))
    legend, legend_h = svg.legend(items, HM_LEFT, base + 58, plot_w)
    body += legend
    label = (
        f"Heat map of step time for {rows} ranks by {columns} steps, from {heat.lo_ms:.2f} ms (lightest) to"
        f" {heat.hi_ms:.2f} ms (darkest)"
    )
    return svg.picture("heatmap", base + 58 + legend_h, label, title_id, body)
