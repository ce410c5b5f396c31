"""The report of a job of many ranks: up to RANKS_TABLE_MAX ranks the per-rank table, beyond it the summary.

The jobs are written by tests/many_ranks.py (hand-made traces, every number set there).
``UPDATE_GOLDEN=1 python -m pytest tests/report/test_many_ranks.py`` rewrites the golden files; review the diff.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from conftest import DATA_DIR, invoke
from many_ranks import replicate_tiny, uniform_job

from dlprof.report import renderer
from dlprof.report.common import NODES_SHOWN, RANKS_TABLE_MAX
from dlprof.report.rank_pictures import HIST_COLOUR, HM_PALETTE
from dlprof.results.report import Report
from dlprof.workflows.analyze import build_report

from .test_golden import normalised
from .test_html import chromium, png_pixels

GOLDEN_DIR = DATA_DIR / "golden"
EXTENSIONS = {"text": "txt", "markdown": "md", "json": "json", "html": "html"}
#: Golden file stem -> (ranks, ranks per node, the slow ranks: rank -> (extra data µs, extra compute µs)).
JOBS = {
    "ranks4": (4, 2, {2: (300, 0)}),
    "ranks20": (20, 4, {3: (500, 0), 17: (0, 400), 9: (250, 0), 12: (0, 150)}),
}


#: The pictures are inline SVG in HTML, without a namespace.
SVG = ""


def pictures(page: str) -> dict[str, ET.Element]:
    """Each ``<svg data-picture=...>`` of the page, parsed as XML (so it must be well-formed)."""
    return {
        m.group(1): ET.fromstring(m.group(0))
        for m in re.finditer(r'<svg\b[^>]*\bdata-picture="([a-z]+)".*?</svg>', page, re.S)
    }


def with_class(svg: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter(tag) if cls in (e.get("class") or "").split()]


def _report(tmp_path: Path, stem: str) -> Report:
    ranks, per_node, slow = JOBS[stem]
    uniform_job(tmp_path / "job", ranks, per_node, slow)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # relative paths in the report: the golden files do not depend on where the test runs
    try:
        return build_report(Path("job"))
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return {stem: _report(tmp_path_factory.mktemp(stem), stem) for stem in JOBS}


@pytest.mark.parametrize("stem", sorted(JOBS))
@pytest.mark.parametrize("fmt", sorted(EXTENSIONS))
def test_renderer_matches_golden_file(reports, stem, fmt):
    rendered = normalised(renderer(Report, fmt)(reports[stem]))
    golden = GOLDEN_DIR / f"{stem}.{EXTENSIONS[fmt]}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")


#: The text report of 64 ranks stays this short (issue 14): the per-rank table alone was 64 lines.
TEXT_LINES_MAX_64 = 150


@pytest.mark.parametrize("per_node", [8, 1])
def test_the_text_of_64_ranks_stays_short(tmp_path, per_node):
    """64 ranks of a dlprof trace with its manifest, on 8 nodes, and on 64 (the most node lines)."""
    report = build_report(replicate_tiny(tmp_path / "job", 64, per_node))
    text = renderer(Report, "text")(report)
    assert len(text.splitlines()) <= TEXT_LINES_MAX_64
    assert "Ranks (64 ranks on " in text and "The 5 slowest ranks" in text
    nodes = 64 // per_node
    listed = [line for line in text.splitlines() if line.startswith("    host")]
    assert len(listed) == min(nodes, NODES_SHOWN)
    if nodes > NODES_SHOWN:
        assert f"Nodes ({nodes}, the slowest first, the {NODES_SHOWN} slowest shown)" in text
    # Each rank is one trace at a factor 1 + rank / 100 of the template's times: rank 63 is the slowest.
    title = next(line for line in text.splitlines() if line.startswith("dlprof analyze: "))
    assert title.endswith("rank63_2063.1700000000000.pt.trace.json)")


def test_up_to_the_threshold_every_rank_has_a_row_and_beyond_it_the_ranks_are_summed_up(tmp_path):
    for ranks in (RANKS_TABLE_MAX, RANKS_TABLE_MAX + 1):
        report = build_report(uniform_job(tmp_path / str(ranks), ranks, 4, {1: (300, 0)}))
        text, markdown = renderer(Report, "text")(report), renderer(Report, "markdown")(report)
        table = f"Ranks ({ranks}; ms per step, profiled; * the slowest"
        summed = f"Ranks ({ranks} ranks on {-(-ranks // 4)} nodes; ms per step, profiled"
        small = ranks <= RANKS_TABLE_MAX
        assert (table in text, summed in text) == (small, not small)
        assert ("The 5 slowest ranks" in markdown, "<details><summary>Every rank" in markdown) == (not small,) * 2
        html = renderer(Report, "html")(report)
        assert ("histogram" in pictures(html), "heatmap" in pictures(html)) == (not small,) * 2


def test_the_json_keeps_every_rank_and_adds_the_summary(reports):
    document = json.loads(renderer(Report, "json")(reports["ranks20"]))
    ranks = document["ranks"]
    assert [r["rank"] for r in ranks["ranks"]] == list(range(20))
    assert [r["host"] for r in ranks["ranks"]] == [f"node{r // 4}" for r in range(20)]
    summary = ranks["summary"]
    assert set(summary) == {
        "step_ms",
        "data_wait_ms",
        "collective_ms",
        "slowest",
        "nodes",
        "data_wait_histogram",
        "step_ms_per_step",
    }
    assert set(summary["data_wait_ms"]) == {"p50", "p90", "max", "max_rank"}
    assert [s["rank"] for s in summary["slowest"]] == [3, 17, 9, 12, 13]
    assert [s["reason"] for s in summary["slowest"][:3]] == ["data", "compute", "data"]
    assert summary["slowest"][0]["waited_by"] == [r for r in range(20) if r != 3]
    assert sorted(r for n in summary["nodes"] for r in n["ranks"]) == list(range(20))
    assert sum(len(b["ranks"]) for b in summary["data_wait_histogram"]) == 20
    heat = summary["step_ms_per_step"]
    assert heat["steps"] == [5, 6] and len(heat["step_ms"]) == 20 and all(len(row) == 2 for row in heat["step_ms"])


def test_the_html_pictures_of_many_ranks(reports):
    run = reports["ranks20"].runs[0]
    summary = run.ranks.summary
    found = pictures(renderer(Report, "html")(reports["ranks20"]))
    histogram, heat = found["histogram"], found["heatmap"]
    for svg in (histogram, heat):  # titled as the other pictures: role img, a <title> it is labelled by
        assert svg.get("role") == "img" and svg.get("aria-labelledby") == svg.find(f"{SVG}title").get("id")
    bins = with_class(histogram, f"{SVG}g", "bin")
    assert len(bins) == len(summary.data_wait_histogram) == 20
    assert [int(b.get("data-ranks")) for b in bins] == [len(b.ranks) for b in summary.data_wait_histogram]
    assert len(histogram.findall(f".//{SVG}g[@class='bin']/{SVG}rect")) == sum(
        1 for b in summary.data_wait_histogram if b.ranks
    )
    assert "Histogram of data wait per step over 20 ranks, in 20 bins" in histogram.find(f"{SVG}title").text
    cells = with_class(heat, f"{SVG}rect", "cell")
    assert len(cells) == 20 * 2  # ranks x steps
    assert {(c.get("data-rank"), c.get("data-step")) for c in cells} == {
        (str(r), str(s)) for r in range(20) for s in (5, 6)
    }
    # Step 5 lasts rank 3's data wait (100 + 30 + 500 µs) and compute (400 + 30) + 200 µs, on every rank.
    assert cells[0].find(f"{SVG}title").text == "rank 0, step 5: 1.26 ms"
    assert "Heat map of step time for 20 ranks by 2 steps" in heat.find(f"{SVG}title").text


def _timeline_ranks(page: str) -> list[str]:
    """The ranks whose training thread the HTML timeline draws, lane by lane."""
    lanes = [g.get("data-lane") for g in with_class(pictures(page)["timeline"], f"{SVG}g", "lane")]
    return [lane.split()[1] for lane in lanes if lane.startswith("rank ")]


def test_the_timeline_draws_the_slowest_ranks_only_beyond_16(reports):
    small, big = (renderer(Report, "html")(reports[stem]) for stem in ("ranks4", "ranks20"))
    assert _timeline_ranks(small) == ["2", "0", "1", "3"] and "timeline-ranks" not in small
    drawn = _timeline_ranks(big)
    summary = reports["ranks20"].runs[0].ranks
    by_own_work = sorted(summary.ranks, key=lambda r: (-r.own_ms, r.rank))
    assert drawn[0] == "3" and len(drawn) == 16  # the pace rank first, then the others in rank order
    assert sorted(map(int, drawn)) == sorted(r.rank for r in by_own_work[:16])
    assert (
        '<p class="note timeline-ranks">The timeline draws the training threads of the 16 slowest ranks; 4 other'
        " ranks are not drawn (every rank is in the ranks above).</p>"
    ) in big


def test_missing_ranks_of_a_big_job_are_named_in_every_format(tmp_path):
    """20 ranks of a job of 24 (a node's run directory not given): the summary of many ranks says so, and the note."""
    run_dir = replicate_tiny(tmp_path / "job", RANKS_TABLE_MAX + 4, 4, world_size=RANKS_TABLE_MAX + 8)
    out = {fmt: invoke("analyze", run_dir, "--format", fmt, "--processes", "1") for fmt in EXTENSIONS}
    assert all(result.exit_code == 0 for result in out.values())
    note = "missing ranks 20-23: no trace of them here"
    heading = "20 of 24 ranks on 5 nodes, missing 20-23; ms per step, profiled"
    assert f"note: {note}" in out["text"].stdout and f"Ranks ({heading}; every rank" in out["text"].stdout
    assert f"**Note:** {note}" in out["markdown"].stdout and f"**Ranks** ({heading})" in out["markdown"].stdout
    assert note in out["html"].stdout and f"<h3>Ranks ({heading})</h3>" in out["html"].stdout
    document = json.loads(out["json"].stdout)
    assert document["missing_ranks"] == [20, 21, 22, 23] and len(document["ranks"]["ranks"]) == 20
    assert invoke("analyze", run_dir, "--format", "json", "-j", "2").stdout == out["json"].stdout
    # A few ranks: the per-rank table's heading says so too.
    small = replicate_tiny(tmp_path / "small", 3, 1, world_size=5)
    text = invoke("analyze", small).stdout
    assert "Ranks (3 of 5, missing 3-4; ms per step" in text and "note: missing ranks 3-4" in text


def test_redact_hides_every_ranks_host(tmp_path):
    """A report of many ranks names their hosts; --redact hides every one, not only the reported rank's."""
    run_dir = replicate_tiny(tmp_path / "job", RANKS_TABLE_MAX + 4, 4)  # hosts host0..host4, in the manifests only
    assert "host3" in invoke("analyze", run_dir, "--format", "text").stdout
    for fmt in ("text", "markdown", "json", "html"):
        result = invoke("analyze", run_dir, "--format", fmt, "--redact")
        assert result.exit_code == 0, result.output
        assert not re.search(r"\bhost\d\b", result.stdout), fmt
        assert "[host-" in result.stdout or "host-" in result.stdout, fmt


def test_ranks_of_unknown_hosts(tmp_path):
    """Traces named neither with a host nor carrying a manifest: one group, said to be of unknown hosts."""
    run_dir = uniform_job(tmp_path / "job", RANKS_TABLE_MAX + 1, 4)
    for trace in run_dir.iterdir():
        trace.rename(run_dir / f"trace{trace.name.split('_')[1].split('.')[0]}.json")
    text = renderer(Report, "text")(build_report(run_dir))
    assert f"Ranks ({RANKS_TABLE_MAX + 1} ranks, hosts unknown; ms per step" in text
    assert re.search(r"^    unknown +0-16 ", text, re.M)  # the one node line


def test_chromium_draws_the_rank_pictures(reports, tmp_path):
    """A real browser draws the histogram's bars and the heat map's cells (their colours fill whole rectangles)."""
    path = tmp_path / "report.html"
    path.write_text(renderer(Report, "html")(reports["ranks20"]), encoding="utf-8")
    dom = chromium("--dump-dom", path.as_uri(), tmp_path=tmp_path).stdout
    assert re.search(r'<svg\b[^>]*data-picture="histogram"', dom) and re.search(
        r'<svg\b[^>]*data-picture="heatmap"', dom
    )
    shot = tmp_path / "page.png"
    # Tall enough for the ranks' part: summary tables, the histogram and the heat map, above the step breakdown.
    chromium(f"--screenshot={shot}", "--window-size=1200,3200", path.as_uri(), tmp_path=tmp_path)
    _, _, rgb = png_pixels(shot)
    pixels = Counter(rgb[i : i + 3] for i in range(0, len(rgb), 3))
    assert pixels[bytes.fromhex(HIST_COLOUR[1:])] >= 500, "no histogram bars in the screenshot"
    # Step 5 is the fastest on every rank, step 6 the slowest: the lightest and the darkest colour, a column each.
    for colour in (HM_PALETTE[0], HM_PALETTE[-1]):
        assert pixels[bytes.fromhex(colour[1:])] >= 5000, f"no heat map cells of {colour} in the screenshot"
