"""SVG building blocks of the HTML reports' pictures: geometry, coordinates, axes, ticks and legends.

Every picture is an inline ``<svg role="img">`` with a ``data-picture`` attribute, so a test or a reader can find it.
"""

from __future__ import annotations

import math

from dlprof.report.page import esc

#: SVG geometry, in viewBox units (the page scales the pictures down to fit narrow windows).
WIDTH = 960
FONT = 12
#: Rough width of one character of 12 px system sans-serif, to lay out legends without a browser.
CHAR_W = 6.8
#: A line chart against num_workers (predicted throughput; a sweep's measurements): margins, plot height, line colour.
CHART_LEFT = 64
CHART_RIGHT = 24
CHART_TOP = 28
CHART_PLOT_H = 220
CHART_LINE = "#1f77b4"


def coord(x: float) -> str:
    """An SVG coordinate: one decimal, no trailing ``.0`` (keeps the markup short)."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def ticks(hi: float, target: int = 5) -> list[float]:
    """Round tick values from 0 up to at least ``hi`` (steps of 1, 2 or 5 times a power of ten)."""
    if not math.isfinite(hi) or hi <= 0:
        hi = 1.0
    raw = hi / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if raw <= m * magnitude * (1 + 1e-9))
    count = math.ceil(hi / step - 1e-9)
    return [i * step for i in range(count + 1)]


def tick_label(value: float, ticks: list[float]) -> str:
    """A tick's label, with as many decimals as the step between ``ticks`` needs."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:.{decimals}f}"


def legend(
    items: list[tuple[str, str]], x: float, y: float, width: float, dashed: str | None = None
) -> tuple[list[str], float]:
    """Swatches with labels, wrapped to ``width``; returns the markup and the height used."""
    parts = ['<g class="legend">']
    cx, cy = x, y
    entries = [(label, colour, False) for label, colour in items] + ([(dashed, "#444", True)] if dashed else [])
    for label, colour, is_line in entries:
        item_w = 18 + len(label) * CHAR_W + 18
        if cx + item_w > x + width and cx > x:
            cx, cy = x, cy + 20
        if is_line:
            parts.append(
                f'<line x1="{coord(cx + 6)}" y1="{coord(cy - 4)}" x2="{coord(cx + 6)}" y2="{coord(cy + 8)}"'
                f' stroke="{colour}" stroke-dasharray="3 2"/>'
            )
        else:
            parts.append(f'<rect x="{coord(cx)}" y="{coord(cy - 4)}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{coord(cx + 18)}" y="{coord(cy + 6)}" font-size="{FONT}">{esc(label)}</text>')
        cx += item_w
    parts.append("</g>")
    return parts, cy - y + 20


def picture(name: str, height: float, label: str, title_id: str, body: list[str]) -> str:
    """One picture: ``body`` (SVG markup) in an ``<svg role="img" data-picture=name>`` titled ``label``."""
    return (
        f'<svg class="picture picture-{name}" data-picture="{name}" role="img" '
        f'aria-labelledby="{title_id}" aria-label="{esc(label)}" viewBox="0 0 {WIDTH} {coord(height)}" '
        f'width="{WIDTH}" height="{coord(height)}" font-size="{FONT}">'
        f'<title id="{title_id}">{esc(label)}</title>' + "".join(body) + "</svg>"
    )


def y_axis(left: float, plot_w: float, top: float, plot_h: float, ticks: list[float], y_of, label: str) -> list[str]:
    """An open ``<g class="axis">``: grid lines with tick labels, the rotated axis label and the baseline."""
    body = ['<g class="axis">']
    for t in ticks:
        y = y_of(t)
        body.append(f'<line x1="{left}" y1="{coord(y)}" x2="{left + plot_w}" y2="{coord(y)}" stroke="#e3e6ea"/>')
        body.append(f'<text x="{left - 6}" y="{coord(y + 4)}" text-anchor="end">{tick_label(t, ticks)}</text>')
    mid = top + plot_h / 2
    body.append(
        f'<text x="14" y="{coord(mid)}" text-anchor="middle" transform="rotate(-90 14 {coord(mid)})">{label}</text>'
    )
    body.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#444"/>')
    return body


def polyline(points: list[tuple[float, float]], colour: str, cls: str, width: float = 2, dashed: bool = False) -> str:
    """A line through ``points`` (SVG coordinates), of class ``cls``; dashed for a line that is not the main one."""
    coords = " ".join(f"{coord(x)},{coord(y)}" for x, y in points)
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    return f'<polyline class="{cls}" points="{coords}" fill="none" stroke="{colour}" stroke-width="{width:g}"{dash}/>'


def error_bar(x: float, y_low: float, y_high: float, colour: str, cap: float = 4) -> str:
    """A vertical bar from ``y_low`` to ``y_high`` (SVG coordinates) with caps: a measurement's spread."""
    return (
        f'<path class="spread" d="M{coord(x)} {coord(y_low)}V{coord(y_high)}M{coord(x - cap)} {coord(y_low)}'
        f'H{coord(x + cap)}M{coord(x - cap)} {coord(y_high)}H{coord(x + cap)}" stroke="{colour}" stroke-width="1.5"'
        ' fill="none"/>'
    )


def count_axis(
    lo: int, hi: int, x_of, base: float, left: float, plot_w: float, label: str = "num_workers"
) -> list[str]:
    """Ticks and labels of whole counts ``lo`` to ``hi`` under a chart (as many as fit), the axis label, and the end of
    the ``<g class="axis">`` that :func:`y_axis` opened."""
    body = []
    every = max(1, math.ceil((hi - lo + 1) * 24 / plot_w))  # keep the labels from overlapping
    for n in range(lo, hi + 1):
        if (n - lo) % every == 0:
            x = coord(x_of(n))
            body.append(f'<line x1="{x}" y1="{base}" x2="{x}" y2="{base + 5}" stroke="#444"/>')
            body.append(f'<text x="{x}" y="{base + 18}" text-anchor="middle">{n}</text>')
    body.append(f'<text x="{left + plot_w / 2}" y="{base + 36}" text-anchor="middle">{esc(label)}</text></g>')
    return body
