"""The HTML report: one self-contained page whose three pictures a real browser draws.

Structure checks run on a real recorded run (``workload_run_2``) and on a small hand-built Report
(escaping, several runs, a run without predictions, a timeline of thousands of bars). Headless
Chromium then loads the real page from disk: its DOM must hold the pictures and its screenshot must
show them (the category colours drawn), not a blank page.
"""

from __future__ import annotations

import re
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from dataclasses import replace
from html import escape
from pathlib import Path

import pytest
from conftest import run_dlprof

from dlprof.analysis.stats import summarize
from dlprof.report.charts import COLOURS
from dlprof.report.html import render
from dlprof.results.advice import Advice, Prediction
from dlprof.results.analysis import CATEGORIES, StepBreakdown, StepTime, Summary
from dlprof.results.report import Lane, Report, RunInfo, RunReport, TimelinePicture
from dlprof.workflows.analyze import build_report

PICTURES = ("timeline", "breakdown", "predicted")
CHROMIUM = Path("/usr/bin/chromium")
#: Seconds Chromium may take to load and dump or screenshot the page (about 2 s here).
CHROMIUM_TIMEOUT_S = 60
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
WINDOW = (1200, 2400)


# --- helpers -------------------------------------------------------------------------------------


def pictures(page: str) -> dict[str, ET.Element]:
    """Each ``<svg data-picture=...>`` of the page, parsed as XML (so it must be well-formed)."""
    found = {}
    for match in re.finditer(r'<svg\b[^>]*\bdata-picture="([a-z]+)".*?</svg>', page, re.S):
        assert match.group(1) not in found, f"two {match.group(1)} pictures"
        found[match.group(1)] = ET.fromstring(match.group(0))
    return found


def with_class(svg: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter(tag) if cls in (e.get("class") or "").split()]


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and RGB(A) bytes of an 8-bit RGB/RGBA PNG: zlib, then undo each row's filter."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[pos + 8 : pos + 18])
        elif kind == b"IDAT":
            idat.append(data[pos + 8 : pos + 8 + size])
        pos += 12 + size
    assert depth == 8 and colour in (2, 6), f"unexpected PNG format (depth {depth}, colour type {colour})"
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    prev, out = bytearray(stride), bytearray()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride) if kind else ():
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            else:  # Paeth
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return width, height, bytes(out) if bpp == 3 else bytes(b for i, b in enumerate(out) if i % 4 != 3)


def chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium): cannot check the page in a real browser")
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
    )
    assert done.returncode == 0, f"chromium failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done


def hand_built_run(name: str = "tiny", predicted: bool = True, main_bars: int = 12) -> RunReport:
    """A run with exact numbers: four 10 ms steps, one worker lane, a GPU lane."""
    steps = [
        StepTime(
            number=n,
            start_us=n * 10_000.0,
            step_ms=10.0,
            data_wait_ms=3.0,
            h2d_ms=0.5,
            forward_ms=2.5,
            backward_ms=2.0,
            optimizer_ms=1.0,
            other_ms=1.0,
        )
        for n in range(4, 8)
    ]
    ten = Summary(10.0, 10.0, 10.0)
    categories = {c: summarize([s.category_ms(c) for s in steps]) for c in CATEGORIES}
    kinds = ["data_wait", "forward", "other", "backward", "optimizer"]
    width = 30.0 / main_bars
    main = [(kinds[i % len(kinds)], i * width, (i + 1) * width) for i in range(main_bars)]
    timeline = TimelinePicture(
        30.0,
        [0.0, 10.0, 20.0],
        [
            Lane("main thread", main),
            Lane("worker 0", [("dataset fetch", 1.0, 6.0), ("tokenizer", 2.0, 3.0), ("collate_fn", 6.0, 7.0)]),
            Lane("GPU", [("gpu", 4.0, 9.0), ("gpu", 14.0, 19.0)]),
        ],
    )
    info = RunInfo(
        name=name,
        trace_file=f"/runs/{name}/trace.json",
        status="complete",
        device="cuda",
        num_workers=1,
        batch_size=8,
        pin_memory=False,
        prefetch_factor=2,
        persistent_workers=False,
        usable_cores=4,
        ram_total_mib=16000,
        gpu_name="Tiny GPU",
        torch_version="2.4.0",
        steps_recorded=4,
        batches_per_step=1.0,
        has_worker_spans=True,
    )
    points = [
        Prediction(num_workers=0, step_ms=13.0, steps_per_s=1000 / 13, bound="main process"),
        Prediction(num_workers=1, step_ms=7.0, steps_per_s=1000 / 7, bound="consumer"),
        Prediction(num_workers=2, step_ms=7.0, steps_per_s=1000 / 7, bound="consumer"),
    ]
    advice = Advice(
        verdict="HIGHLY",
        num_workers=1 if predicted else None,
        pin_memory=True,
        prefetch_factor=None,
        persistent_workers=None,
        bound="consumer" if predicted else None,
        predicted=points if predicted else [],
        evidence=["data wait 3.00 ms of a 10.00 ms step (30.0 %)"],
        basis=["producer cost measured in the loader processes"],
    )
    return RunReport(
        info=info, steps=StepBreakdown(steps, ten, categories), loader=None, gpu=None, advice=advice, timeline=timeline
    )


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(workload_run_2) -> Report:
    return build_report(workload_run_2)


@pytest.fixture(scope="module")
def page(report) -> str:
    return render(report)


# --- the page, on a real run ---------------------------------------------------------------------


def test_page_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<style>" in page  # the CSS is inline
    for forbidden in ("<link", "<script", "<img", "<iframe", "@import", "url(", "@font-face"):
        assert forbidden not in page.lower(), f"{forbidden} in the page"
    # No attribute points outside the page (in-page anchors like href="#run-1" are fine).
    assert not re.search(r'\b(src|href|xlink:href|action)\s*=\s*["\']?\s*(https?:|//|file:|data:)', page, re.I)


def test_page_has_three_accessible_pictures_in_figures(page):
    found = pictures(page)
    assert sorted(found) == sorted(PICTURES)
    for name, svg in found.items():
        assert svg.get("role") == "img" and svg.get("aria-label"), name
        assert svg[0].tag == "title" and svg[0].text, f"{name}: the first child should be a <title>"
        assert re.search(rf'<figure><svg\b[^>]*data-picture="{name}".*?</svg><figcaption>[^<]+', page, re.S), (
            f"{name} is not in a captioned <figure>"
        )


def test_timeline_has_a_label_per_lane_step_marks_and_merged_bars(page, report):
    picture = report.runs[0].timeline
    svg = pictures(page)["timeline"]
    labels = [e.findtext("title") for e in with_class(svg, "text", "lane-label")]
    assert labels == [lane.label for lane in picture.lanes]
    assert [lane.label for lane in picture.lanes][:1] == ["main thread"] and len(picture.lanes) >= 2  # workers recorded
    assert len(with_class(svg, "line", "step-boundary")) == len(picture.step_starts_ms) + 1
    bars = sum(len(lane.bars) for lane in picture.lanes)
    rects = len(list(svg.iter("rect")))
    assert bars > 500 and rects < bars / 2, f"{rects} rectangles for {bars} bars: sub-pixel bars not merged"
    axis = [t.text for t in svg.iter("text") if t.text and re.fullmatch(r"\d+(\.\d+)?", t.text)]
    assert axis[0] in ("0", "0.0") and len(axis) >= 3 and "time (ms)" in ET.tostring(svg, encoding="unicode")


def test_breakdown_has_one_bar_per_step_stacked_in_category_order(page, report):
    steps = report.runs[0].steps.steps
    bars = with_class(pictures(page)["breakdown"], "g", "bar")
    assert [int(b.get("data-step")) for b in bars] == [s.number for s in steps]
    for bar, step in zip(bars, steps):
        drawn = [r.get("data-category") for r in bar.iter("rect")]
        assert drawn == [c for c in CATEGORIES if step.category_ms(c) > 0]  # bottom to top, zeros left out
        heights = sum(float(r.get("height")) for r in bar.iter("rect"))
        assert heights > 0
    legend = ET.tostring(pictures(page)["breakdown"], encoding="unicode")
    assert all(label in legend for label in ("data wait", "forward", "backward", "optimizer", "other"))


def test_predicted_has_one_point_per_prediction_and_marks_the_recommendation(page, report):
    advice = report.runs[0].advice
    assert advice.predicted, "the recorded run should have predictions"
    points = with_class(pictures(page)["predicted"], "circle", "point")
    assert [int(p.get("data-num-workers")) for p in points] == [p.num_workers for p in advice.predicted]
    chosen = [p for p in points if "recommended" in p.get("class").split()]
    assert [int(p.get("data-num-workers")) for p in chosen] == [advice.num_workers]


def test_page_carries_the_recommendation_evidence_and_tables(page, report):
    run = report.runs[0]
    assert f"num_workers={run.advice.num_workers}" in page
    for line in run.advice.evidence + run.advice.basis:
        assert f"<li>{escape(line)}</li>" in page
    for heading in ("Step breakdown", "Loader, per batch", "ms per step", "worker 0"):
        assert heading in page


def test_analyze_cli_writes_the_html_page(workload_run_2, tmp_path):
    out = tmp_path / "report.html"
    done = run_dlprof("analyze", str(workload_run_2), "--format", "html", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(pictures(out.read_text(encoding="utf-8"))) == sorted(PICTURES)


# --- the page in a real browser -------------------------------------------------------------------


def test_chromium_renders_the_pictures(page, report, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    dom = chromium("--dump-dom", path.as_uri(), tmp_path=tmp_path).stdout
    for name in PICTURES:
        assert re.search(rf'<svg\b[^>]*data-picture="{name}"', dom), f"{name} picture missing from the rendered DOM"
    assert dom.count('class="lane-label"') == len(report.runs[0].timeline.lanes)

    shot = tmp_path / "page.png"
    chromium(f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", path.as_uri(), tmp_path=tmp_path)
    width, height, rgb = png_pixels(shot)
    assert (width, height) == WINDOW
    pixels = Counter(rgb[i : i + 3] for i in range(0, len(rgb), 3))
    background = sum(n for _, n in pixels.most_common(2)) / (width * height)  # the page and its margin
    assert len(pixels) > 200 and background < 0.95, (
        f"{len(pixels)} colours, {background:.0%} background: the page looks blank"
    )
    # The pictures were drawn: their category colours fill whole rectangles of pixels.
    for kind in ("data_wait", "forward", "backward", "optimizer"):
        assert pixels[bytes.fromhex(COLOURS[kind][1:])] >= 200, f"no {kind} colour in the screenshot"


# --- a hand-built report: exact structure ---------------------------------------------------------


def test_hand_built_report_has_exact_pictures():
    run = hand_built_run()
    found = pictures(render(Report([run])))
    assert [e.findtext("title") for e in with_class(found["timeline"], "text", "lane-label")] == [
        "main thread",
        "worker 0",
        "GPU",
    ]
    assert [b.get("data-step") for b in with_class(found["breakdown"], "g", "bar")] == ["4", "5", "6", "7"]
    assert [p.get("data-num-workers") for p in with_class(found["predicted"], "circle", "point")] == ["0", "1", "2"]
    # The tokenizer call nests in the dataset fetch: drawn inset, inside the fetch's rectangle.
    worker = next(g for g in with_class(found["timeline"], "g", "lane") if g.get("data-lane") == "worker 0")
    rects = {r.get("fill"): r for r in worker.iter("rect")}
    fetch, tokenizer = rects[COLOURS["dataset fetch"]], rects[COLOURS["tokenizer"]]
    assert float(fetch.get("y")) < float(tokenizer.get("y")) and float(tokenizer.get("height")) < float(
        fetch.get("height")
    )
    assert float(fetch.get("x")) <= float(tokenizer.get("x"))


def test_many_sub_pixel_bars_stay_small():
    run = hand_built_run(main_bars=20_000)  # 1.5 µs each: hundreds per pixel
    svg = pictures(render(Report([run])))["timeline"]
    main = next(g for g in with_class(svg, "g", "lane") if g.get("data-lane") == "main thread")
    drawn = list(main.iter("rect"))[1:]  # after the lane's background
    assert 0 < len(drawn) <= int(svg.get("width")), f"{len(drawn)} rectangles for the main thread"


def test_several_runs_are_compared_first_and_text_is_escaped():
    nasty = '<script>alert("x")</script> & co'
    runs = [hand_built_run("a"), hand_built_run(nasty)]
    runs[1] = replace(runs[1], timeline=replace(runs[1].timeline, lanes=[Lane("<b>lane</b>", [("other", 0.0, 30.0)])]))
    page = render(Report(runs))
    assert "<script" not in page and "<b>lane" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in page
    compared = page.index("Runs compared")
    assert compared < page.index('id="run-1"') < page.index('id="run-2"')
    assert 'href="#run-1"' in page and 'href="#run-2"' in page
    assert page.count('data-picture="timeline"') == 2  # each run has its pictures; both svgs still parse
    for match in re.finditer(r"<svg\b.*?</svg>", page, re.S):
        ET.fromstring(match.group(0))


def test_run_without_predictions_gets_a_note_instead_of_the_picture():
    page = render(Report([hand_built_run(predicted=False)]))
    assert sorted(pictures(page)) == ["breakdown", "timeline"]
    assert 'class="note no-predictions"' in page
    assert "num_workers=keep" in page


# --- the throughput picture: both bases, and the trials measured ------------------------------------


def _golden_report(name: str) -> Report:
    from conftest import DATA_DIR

    return build_report(DATA_DIR / name)


def test_throughput_picture_draws_both_bases_and_names_the_one_the_advice_compares_on():
    report = _golden_report("tiny_dlprof_trace.json")
    advice = report.runs[0].advice
    page = render(report)
    svg = pictures(page)["predicted"]
    basis = with_class(svg, "polyline", "basis")
    other = with_class(svg, "polyline", "other-basis")
    assert len(basis) == 1 and len(other) == 1 and other[0].get("stroke-dasharray")
    # The recommendation compares over whole epochs: its line goes through the epoch predictions, one point each.
    points = with_class(svg, "circle", "point")
    assert [p.findtext("title").split(": predicted ")[1].split(" steps/s")[0] for p in points] == [
        f"{p.epoch_steps_per_s:.2f}" for p in advice.predicted
    ]
    assert len(basis[0].get("points").split()) == len(advice.predicted) == len(other[0].get("points").split())
    text = ET.tostring(svg, encoding="unicode")
    assert "predicted over whole epochs: the basis the recommendation compares on" in text
    assert "predicted inside an epoch" in text
    chosen = next(p for p in advice.predicted if p.num_workers == advice.num_workers)
    assert chosen.num_workers == 0
    assert f"recommended: num_workers=0, predicted {chosen.epoch_steps_per_s:.2f} steps/s over whole epochs" in text
    assert "Solid: predicted over whole epochs, which the recommendation rests on" in page


def _bar(group: ET.Element) -> tuple[float, float]:
    """The y extent of a trial's spread bar: its path starts ``Mx y_low Vy_high``."""
    d = next(group.iter("path")).get("d")
    low = float(d.split()[1].split("V")[0])
    high = float(d.split("V")[1].split("M")[0])
    return low, high


def test_throughput_picture_shows_the_trials_as_points_with_their_spread():
    report = _golden_report("tiny_trials_trace.json")
    run = report.runs[0]
    svg = pictures(render(report))["predicted"]
    groups = with_class(svg, "g", "trial")
    # Every tried setting, over whole epochs (filled: the basis) and inside an epoch (hollow).
    drawn = [(g.get("data-num-workers"), g.get("data-persistent"), g.get("data-basis")) for g in groups]
    expected = [
        (str(r.num_workers), str(r.persistent_workers).lower(), basis)
        for r in run.trials.settings
        for basis in ("over whole epochs", "inside an epoch")
    ]
    assert drawn == expected
    for g in groups:
        mark = next(e for e in g if (e.get("class") or "") == "trial-point")
        assert mark.tag == ("rect" if g.get("data-persistent") == "true" else "circle")
        assert (mark.get("fill") == "#fff") == (g.get("data-basis") == "inside an epoch")
    # The bars are as long as the spread: on the y scale, spread % of the value.
    ticks = [float(t.text) for t in with_class(svg, "g", "axis")[0].iter("text") if re.fullmatch(r"[\d.]+", t.text)]
    zero = next(g for g in groups if g.get("data-num-workers") == "0" and g.get("data-basis") == "inside an epoch")
    low, high = _bar(zero)
    zero_run = run.trials.settings[0]
    units_per_step = 220 / max(ticks)  # CHART_PLOT_H over the axis's top
    assert low - high == pytest.approx(zero_run.steps_per_s * zero_run.speed.spread_pct / 100 * units_per_step, abs=0.2)
    # The recommendation rests on the measured persistent two workers: ringed and labelled with the measured speed.
    assert len(with_class(svg, "circle", "recommended-ring")) == 1
    chosen = next(r for r in run.trials.settings if r.num_workers == 2 and r.persistent_workers)
    label = with_class(svg, "text", "recommended-label")[0].text
    assert (
        label
        == f"recommended: num_workers=2 (persistent), measured {chosen.epoch_steps_per_s:.2f} steps/s over whole epochs"
    )


def test_trials_table_and_what_the_recommendation_rests_on_in_the_page():
    page = render(_golden_report("tiny_trials_trace.json"))
    assert "<h3>Predicted and measured throughput</h3>" in page and "<h3>Measured in this training</h3>" in page
    assert '<p class="rests-on">The recommended num_workers rests on measurement: num_workers=2 was tried' in page
    table = re.search(r'<table class="trials">.*?</table>', page, re.S).group(0)
    assert table.count("<tr") == 1 + 5 and table.count('class="chosen"') == 1


# --- findings ----------------------------------------------------------------------------------------


def test_findings_come_after_the_headline_each_with_its_gain_evidence_and_fix():
    from report.findings_example import FINDINGS, with_findings

    report = _golden_report("tiny_dlprof_trace.json")
    plain = render(with_findings(report, ()))
    nasty = replace(FINDINGS[0], evidence='<script>alert("x")</script> & padding')
    page = render(with_findings(report, (nasty, *FINDINGS[1:])))
    assert "Findings" not in plain and 'class="rec findings"' in page
    headline = report.runs[0].advice.headline
    assert headline is not None
    section = page.index('class="rec findings"')
    assert page.index(escape(headline.text)) < section < page.index('class="facts"') < page.index("Recommendation")
    found = re.findall(r'<li class="finding ([a-z]+)" data-finding="([a-z-]+)">(.*?)</li>', page)
    assert [(severity, id) for severity, id, _ in found] == [(f.severity, f.id) for f in FINDINGS]
    for (_, _, item), finding in zip(found, FINDINGS):
        assert escape(finding.title) in item and f"fix: {escape(finding.fix)}" in item
    assert ": up to 31 % faster<br>" in found[0][2] and ": 12 % faster (predicted)<br>" in found[1][2]
    assert "</strong><br>" in found[3][2]  # no gain in speed told, so none written
    assert "<script" not in page and "&lt;script&gt;" in found[0][2]
    assert sorted(pictures(page)) == sorted(PICTURES)  # the rest of the page is drawn as before
    # The TensorBoard tab serves this page as it is; a notebook shows its body.
    from dlprof.report.frames import html_body

    assert 'data-finding="padding"' in html_body(with_findings(report))
