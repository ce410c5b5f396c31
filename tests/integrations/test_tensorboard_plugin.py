"""The dlprof tab of TensorBoard (dlprof.tensorboard): its routes through TensorBoard's own WSGI application, the
runs it finds under a logdir, its cache, and (slow) the tab in a real TensorBoard opened in headless Chromium."""

from __future__ import annotations

import gzip
import html
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import DATA_DIR, SMALL_WORKLOAD, free_port, run_dlprof
from many_ranks import replicate_tiny
from tensorboard.backend.application import TensorBoardWSGI
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import dlprof
from dlprof.core import schema
from dlprof.report.common import headline_line
from dlprof.tensorboard.plugin import DlprofPlugin
from dlprof.tensorboard.runs import FAILED, READY, LogdirRun, Outcome, ReportCache, find_logdir_runs

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
WINDOW = (1400, 1800)
#: How long a test waits for a report to be analysed, or for TensorBoard to answer (seconds).
WAIT_S = 60


def _copy(source: Path, run_dir: Path, name: str = "host_1.1.pt.trace.json") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, run_dir / name))


def _node_trace(run_dir: Path, rank: int, job: str) -> Path:
    """Rank ``rank`` of the two-rank test job, with a manifest naming ``job`` (as each node of a job writes it)."""
    document = json.loads((DATA_DIR / "ranks" / f"rank{rank}.json").read_text())
    manifest = {"manifest_version": 4, "status": "complete", "rank": rank, "world_size": 2, "job": job}
    events = document.pop("traceEvents")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"host{rank}_{100 + rank}.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({**document, "dlprof": manifest, "traceEvents": events}).encode()))
    return path


@pytest.fixture
def logdir(tmp_path) -> Path:
    """A logdir of every kind of run: one trace, trials, a sweep's counts with its scalars, the two nodes of a job,
    one being recorded, one left over from a failed record, and a trace that cannot be read."""
    root = tmp_path / "traces"
    _copy(DATA_DIR / "tiny_dlprof_trace.json", root / "tiny")
    _copy(DATA_DIR / "tiny_trials_trace.json", root / "trials")
    for count in (0, 2):
        _copy(DATA_DIR / "tiny_dlprof_trace.json", root / "sweep" / str(count))
    (root / "sweep" / "scalars").mkdir()
    (root / "sweep" / "scalars" / "events.out.tfevents.1.host").write_bytes(b"")
    _node_trace(root / "node0" / "job", 0, "rdzv-id=j")
    _node_trace(root / "node1" / "job", 1, "rdzv-id=j")
    live = root / "recording" / schema.SCRATCH_DIR
    live.mkdir(parents=True)
    (live / schema.SCRATCH_OWNER_FILE).write_text(json.dumps({"pid": os.getpid()}))
    (root / "leftover" / schema.SCRATCH_DIR).mkdir(parents=True)
    (root / "broken").mkdir()
    (root / "broken" / "host_3.3.pt.trace.json").write_text('{"traceEvents": [')
    return root


def _client(logdir: Path) -> tuple[Client, DlprofPlugin]:
    plugin = DlprofPlugin(base_plugin.TBContext(logdir=str(logdir)))
    return Client(TensorBoardWSGI([plugin])), plugin


def _report(client: Client, run: str, timeout_s: float = WAIT_S):
    """The report route's answer once the run is analysed (it answers 202 meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.get("/data/plugin/dlprof/report", query_string={"run": run})
        if response.status_code != 202 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _line(page: str) -> str:
    """The one line of a page that is not a report."""
    start = page.index('<p class="dlprof-line">') + len('<p class="dlprof-line">')
    return html.unescape(page[start : page.index("</p>", start)])


# --- the runs under a logdir ---------------------------------------------------------------------------


def test_every_run_under_the_logdir_is_listed(logdir):
    runs = {run.name: run for run in find_logdir_runs(logdir)}
    assert sorted(runs) == [
        "broken",
        "leftover",
        "node0/job + node1/job",
        "recording",
        "sweep/0",
        "sweep/2",
        "tiny",
        "trials",
    ]
    assert runs["node0/job + node1/job"].run_dirs == (logdir / "node0" / "job", logdir / "node1" / "job")
    assert runs["recording"].problem == (
        f"dlprof: error: {logdir / 'recording'}: is still being recorded (dlprof record, pid {os.getpid()}); analyze"
        " it once that has finished"
    )
    assert "did not finish" in (runs["leftover"].problem or "")
    assert runs["tiny"].problem is None and runs["tiny"].traces == (logdir / "tiny" / "host_1.1.pt.trace.json",)


def test_a_run_directory_given_as_the_logdir_is_its_one_run(logdir):
    (run,) = find_logdir_runs(logdir / "tiny")
    assert run.name == "tiny" and run.run_dirs == (logdir / "tiny",)


def test_a_missing_logdir_holds_no_run(tmp_path):
    assert find_logdir_runs(tmp_path / "nowhere") == []


# --- the routes -----------------------------------------------------------------------------------------------


def test_the_plugin_is_registered_and_listed(logdir):
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="tensorboard_plugins") if e.name == "dlprof"]
    assert entry.load() is DlprofPlugin
    client, _ = _client(logdir)
    listing = client.get("/data/plugins_listing").get_json()
    assert listing["dlprof"]["enabled"] is True
    assert listing["dlprof"]["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/dlprof/index.js"}
    script = client.get("/data/plugin/dlprof/index.js")
    assert script.status_code == 200 and "export async function render()" in script.get_data(as_text=True)


def test_the_runs_route_lists_every_run(logdir):
    client, _ = _client(logdir)
    listing = client.get("/data/plugin/dlprof/runs").get_json()
    assert listing["logdir"] == str(logdir)
    names = [run["name"] for run in listing["runs"]]
    assert names == [run.name for run in find_logdir_runs(logdir)]
    assert listing["newest"] in names
    problems = {run["name"]: run["problem"] for run in listing["runs"]}
    assert problems["tiny"] is None and problems["recording"].startswith("dlprof: error: ")


def test_the_report_is_the_html_reports_page_and_is_cached(logdir):
    client, plugin = _client(logdir)
    first = client.get("/data/plugin/dlprof/report", query_string={"run": "tiny"})
    assert first.status_code == 202 and "analysing tiny" in first.get_data(as_text=True)
    page = _report(client, "tiny").get_data(as_text=True)
    (run,) = dlprof.analyze(logdir / "tiny").runs
    assert '<p class="verdict headline' in page and html.escape(headline_line(run)) in page
    assert 'data-picture="breakdown"' in page and 'data-picture="timeline"' in page
    assert plugin._cache.analyses == 1

    again = client.get("/data/plugin/dlprof/report", query_string={"run": "tiny"})
    assert again.status_code == 200 and again.get_data(as_text=True) == page
    assert plugin._cache.analyses == 1, "the second load analysed the run again"

    trace = logdir / "tiny" / "host_1.1.pt.trace.json"
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    assert _report(client, "tiny").status_code == 200
    assert plugin._cache.analyses == 2, "a trace written again was not analysed again"


def test_the_trials_and_the_job_of_two_nodes_are_reported(logdir):
    client, _ = _client(logdir)
    trials = _report(client, "trials").get_data(as_text=True)
    assert 'data-picture="predicted"' in trials and "trial" in trials
    job = _report(client, "node0/job + node1/job").get_data(as_text=True)
    (run,) = dlprof.analyze([logdir / "node0" / "job", logdir / "node1" / "job"]).runs
    assert html.escape(headline_line(run)) in job and "<h3>Ranks (2; " in job


def test_an_unreadable_run_shows_the_clis_one_line(logdir):
    client, _ = _client(logdir)
    response = _report(client, "broken")
    assert response.status_code == 200
    line = _line(response.get_data(as_text=True))
    cli = run_dlprof("analyze", str(logdir / "broken"))
    assert cli.returncode == 2 and line == cli.stderr.strip().splitlines()[-1]
    for name in ("recording", "leftover"):
        line = _line(_report(client, name).get_data(as_text=True))
        assert line.startswith(f"dlprof: error: {logdir / name}: ") and "\n" not in line
    # the page stays up: the other runs still answer
    assert _report(client, "tiny").status_code == 200


def test_an_unknown_run_is_one_line(logdir):
    client, _ = _client(logdir)
    response = client.get("/data/plugin/dlprof/report", query_string={"run": "nope"})
    assert response.status_code == 404 and _line(response.get_data(as_text=True)).startswith("dlprof: error: no run")


def test_an_analysis_that_raises_leaves_the_cache_working(tmp_path):
    calls = []

    def analyse(run: LogdirRun):
        calls.append(run.name)
        if run.name == "bad":
            raise RuntimeError("boom")
        return Outcome(READY, "page")

    cache = ReportCache(analyse)
    bad = cache.wait(LogdirRun("bad", (tmp_path,), ()), WAIT_S)
    assert bad.state == FAILED and "RuntimeError: boom" in bad.text
    assert cache.wait(LogdirRun("good", (tmp_path / "x",), ()), WAIT_S).state == READY
    assert calls == ["bad", "good"]


# --- the tab in a real TensorBoard and a real browser --------------------------------------------------


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


def _chromium(*args: str, profile: Path) -> str:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium): cannot check the tab in a real browser")
    done = subprocess.run(
        [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=15000", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"chromium failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_tab_in_tensorboard_in_chromium(tmp_path):
    logdir = tmp_path / "traces"
    recorded = run_dlprof("record", "--out", str(logdir), "--name", "tb", *SMALL_WORKLOAD)
    assert recorded.returncode == 0, f"dlprof record failed:\n{recorded.stderr[-3000:]}"
    (run,) = dlprof.analyze(logdir / "tb").runs
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "tensorboard.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert server.poll() is None, (tmp_path / "tensorboard.log").read_text()[-3000:]
            try:
                status, listing = _get(f"{base}/data/plugins_listing")
                break
            except OSError:
                assert time.monotonic() < deadline, "TensorBoard did not answer"
                time.sleep(0.3)
        assert status == 200 and json.loads(listing)["dlprof"]["enabled"] is True

        # the tab as TensorBoard frames it: its module rendered the run list and the report
        dom = _chromium("--dump-dom", f"{base}/data/plugin_entry.html?name=dlprof", profile=tmp_path / "chromium")
        assert '<option value="tb">tb</option>' in dom
        assert html.escape(headline_line(run)) in dom, "the headline is not in the tab's rendered DOM"
        assert 'data-picture="breakdown"' in dom and "data wait" in dom, "the breakdown is not in the tab's DOM"
        status, page = _get(f"{base}/data/plugin/dlprof/report?run=tb")
        assert status == 200 and html.escape(headline_line(run)) in page

        # TensorBoard's own page, on the dlprof tab
        top = _chromium("--dump-dom", f"{base}/#dlprof", profile=tmp_path / "chromium")
        assert 'data-plugin-id="dlprof"' in top, "no dlprof tab on TensorBoard's page"
        assert '<iframe src="data/plugin_entry.html?name=dlprof">' in top, "the dlprof tab is not the one shown"
        shots = Path(os.environ.get("DLPROF_ARTIFACTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "tensorboard-dlprof-tab.png"
        _chromium(
            f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", f"{base}/#dlprof", profile=tmp_path / "c2"
        )
        assert shot.stat().st_size > 10_000
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()
    assert server.poll() is not None


def test_an_analysis_never_holds_up_the_other_routes(logdir):
    client, plugin = _client(logdir)
    release = threading.Event()

    def analyse(run: LogdirRun) -> Outcome:
        release.wait(WAIT_S)
        return Outcome(READY, "page")

    plugin._cache = ReportCache(analyse)
    try:
        start = time.monotonic()
        assert client.get("/data/plugin/dlprof/report", query_string={"run": "tiny"}).status_code == 202
        assert client.get("/data/plugin/dlprof/runs").status_code == 200
        assert client.get("/data/plugins_listing").status_code == 200
        assert client.get("/data/plugin/dlprof/report", query_string={"run": "tiny"}).status_code == 202
        assert time.monotonic() - start < WAIT_S / 2, "a route waited for the analysis"
    finally:
        release.set()
    assert _report(client, "tiny").get_data(as_text=True) == "page"


def test_a_run_of_sixteen_ranks_is_one_run(tmp_path):
    replicate_tiny(tmp_path / "traces" / "ranks16", 16, 8)
    (run,) = find_logdir_runs(tmp_path / "traces")
    assert run.name == "ranks16" and len(run.traces) == 16
    client, _ = _client(tmp_path / "traces")
    assert "<h3>Ranks (16" in _report(client, "ranks16").get_data(as_text=True)
