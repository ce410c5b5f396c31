"""``dlprof open``: the trace served once to the Perfetto UI, on 127.0.0.1 only.

The server runs as a user starts it (``python -m dlprof open ... --print-url``); the test fetches the URL it
prints, as the UI would, with the UI's ``Origin``. Nothing loads the Perfetto UI or leaves the machine.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import DATA_DIR, assert_one_line_error, invoke, leftover_processes
from many_ranks import replicate_tiny

from dlprof.core.errors import UsageError
from dlprof.workflows.open_trace import PERFETTO_ORIGIN, _browser, perfetto_url, trace_to_open

GZ_TRACE = DATA_DIR / "kineto_pt19_resnet50_workers4_step7.json.gz"
URL_PREFIX = f"{PERFETTO_ORIGIN}/#!/?url="
#: The server must be gone this soon after it has sent the file (seconds).
EXIT_S = 5


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dlprof", "open", *args, "--print-url"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _printed_url(process: subprocess.Popen, within_s: float = 60) -> str:
    """The first line the server prints on stdout: the Perfetto UI's address."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(within_s):
            process.kill()
            pytest.fail(f"dlprof open printed no URL in {within_s} s")
    return process.stdout.readline().strip()


def _trace_address(url: str) -> str:
    assert url.startswith(URL_PREFIX), url
    address = url[len(URL_PREFIX) :]
    assert address.startswith("http://127.0.0.1:"), address  # nothing but the loopback address
    return address


def _fetch(address: str, method: str = "GET", headers: dict | None = None):
    request = urllib.request.Request(address, method=method, headers={"Origin": PERFETTO_ORIGIN, **(headers or {})})
    return urllib.request.urlopen(request, timeout=10)


def _ended(process: subprocess.Popen, marker: str) -> tuple[str, str]:
    """The server exited by itself with code 0, soon, leaving no process; the rest of its stdout, and its stderr."""
    code = process.wait(timeout=EXIT_S)
    stdout, stderr = process.communicate()
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)
    assert leftover_processes(marker) == []
    return stdout, stderr


def _two_ranks(directory: Path) -> Path:
    """A run of two ranks where rank 0 is the slower (every time doubled), unlike the order of the files."""
    return replicate_tiny(directory, ranks=2, ranks_per_node=1, factor=lambda rank: 2.0 - rank)


@pytest.mark.slow
def test_serves_the_trace_once_as_it_is_on_disk_and_ends(tmp_path):
    trace = shutil.copy(GZ_TRACE, tmp_path / "my run.pt.trace.json.gz")
    process = _start(str(trace), "--port", "0", "--timeout", "60")
    address = _trace_address(_printed_url(process))
    assert address.endswith("/my%20run.pt.trace.json.gz")
    preflight = _fetch(
        address,
        "OPTIONS",
        {"Access-Control-Request-Method": "GET", "Access-Control-Request-Private-Network": "true"},
    )
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == PERFETTO_ORIGIN
    assert preflight.headers["Access-Control-Allow-Private-Network"] == "true"
    with pytest.raises(urllib.error.HTTPError) as other:
        _fetch(address.rsplit("/", 1)[0] + "/etc-passwd")
    assert other.value.code == 404
    assert process.poll() is None  # neither ended it
    with _fetch(address) as response:
        body = response.read()
        assert response.headers["Access-Control-Allow-Origin"] == PERFETTO_ORIGIN
        assert response.headers["Content-Length"] == str(trace.stat().st_size)
        assert response.headers["Content-Type"] == "application/gzip"
        assert "Content-Encoding" not in response.headers  # the gzip bytes themselves: the UI unpacks them
    assert body == trace.read_bytes()
    _ended(process, str(tmp_path))


@pytest.mark.slow
def test_a_taken_port_falls_back_to_a_free_one_in_one_line(tmp_path):
    trace = shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", tmp_path / "tiny.pt.trace.json")
    holder = socket.socket()
    try:
        try:
            holder.bind(("127.0.0.1", 9001))
            holder.listen()
        except OSError:  # something else holds 9001 already: taken all the same
            pass
        process = _start(str(trace), "--timeout", "60")
        address = _trace_address(_printed_url(process))
        port = int(address.split(":")[2].split("/")[0])
        assert port != 9001
        with _fetch(address) as response:
            assert response.read() == trace.read_bytes()
            assert response.headers["Content-Type"] == "application/json"
    finally:
        holder.close()
    _, stderr = _ended(process, str(tmp_path))
    fallback = [line for line in stderr.splitlines() if line.startswith("dlprof: port")]
    assert fallback == [fallback[0]] and f"port 9001 is taken; serving on 127.0.0.1:{port} instead" in fallback[0]


@pytest.mark.slow
def test_rank_picks_the_file_served(tmp_path):
    run = _two_ranks(tmp_path / "job")
    process = _start(str(run), "--rank", "1", "--port", "0", "--timeout", "60")
    address = _trace_address(_printed_url(process))
    assert address.endswith("/rank1_2001.1700000000000.pt.trace.json")
    with _fetch(address) as response:
        assert response.read() == (run / "rank1_2001.1700000000000.pt.trace.json").read_bytes()
    assert "rank 1 of ranks 0-1" in _ended(process, str(tmp_path))[1]


@pytest.mark.slow
def test_the_browser_is_started_at_the_url(tmp_path):
    """``BROWSER`` names a stand-in that writes down the address it was started at (webbrowser honours it)."""
    trace = shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", tmp_path / "tiny.pt.trace.json")
    seen = tmp_path / "seen.txt"
    stand_in = tmp_path / "browser.py"
    stand_in.write_text(f"import sys\nopen({str(seen)!r}, 'w').write(sys.argv[1])\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "dlprof", "open", str(trace), "--port", "0", "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "BROWSER": f"{sys.executable} {stand_in} %s"},
    )
    deadline = time.monotonic() + 60
    while not seen.exists() or not seen.read_text():
        assert process.poll() is None and time.monotonic() < deadline, "the browser was not started"
        time.sleep(0.05)
    with _fetch(_trace_address(seen.read_text())) as response:
        assert response.read() == trace.read_bytes()
    stdout, stderr = _ended(process, str(tmp_path / "tiny"))
    assert stdout == ""  # the URL went to the browser, not stdout
    assert f"opened {seen.read_text()} in the browser" in stderr


@pytest.mark.slow
def test_ctrl_c_stops_it_in_one_line(tmp_path):
    trace = shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", tmp_path / "tiny.pt.trace.json")
    process = _start(str(trace), "--port", "0", "--timeout", "60")
    _printed_url(process)
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=EXIT_S)
    _, stderr = process.communicate()
    assert code == 130
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == "dlprof: stopped serving the trace (Ctrl-C)"


def test_default_rank_is_the_one_analyze_reports(tmp_path):
    run = _two_ranks(tmp_path / "job")
    chosen = trace_to_open(run)
    assert (chosen.rank, chosen.ranks, chosen.slowest) == (0, (0, 1), True)
    assert chosen.trace == run / "rank0_2000.1700000000000.pt.trace.json"
    other = trace_to_open(run, rank=1)
    assert (other.trace.name, other.slowest) == ("rank1_2001.1700000000000.pt.trace.json", False)


def test_a_trace_file_or_a_run_of_one_trace_is_opened_as_it_is(tmp_path):
    assert trace_to_open(GZ_TRACE).trace == GZ_TRACE
    run = tmp_path / "run"
    run.mkdir()
    trace = Path(shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", run / "a.pt.trace.json"))
    assert trace_to_open(run).trace == trace
    assert trace_to_open(run, rank=0).rank == 0  # its manifest says rank 0


def test_a_directory_of_runs_is_refused(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", tmp_path / name / "x.pt.trace.json")
    with pytest.raises(UsageError, match="a directory of 2 runs"):
        trace_to_open(tmp_path)


def test_the_url_is_perfettos_own_form():
    assert perfetto_url(Path("/x/a b.json.gz"), 9001) == (
        "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/a%20b.json.gz"
    )


def test_missing_path_is_one_line(tmp_path):
    assert_one_line_error(invoke("open", tmp_path / "nope", "--print-url"), "nope", "no such file or directory")


def test_directory_without_a_trace_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert_one_line_error(invoke("open", tmp_path, "--print-url"), "no trace files")


def test_a_rank_not_in_the_run_names_its_ranks(tmp_path):
    run = _two_ranks(tmp_path / "job")
    assert_one_line_error(invoke("open", run, "--rank", "5", "--print-url"), "--rank 5", "ranks are 0-1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="elsewhere a browser needs no display")
def test_nothing_fetched_ends_after_the_timeout_in_one_line(tmp_path, monkeypatch):
    """In-process (CliRunner): without a display there is no browser to start, so the URL goes to stdout."""
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        monkeypatch.delenv(name, raising=False)
    assert _browser() is None
    trace = shutil.copy(DATA_DIR / "tiny_dlprof_trace.json", tmp_path / "tiny.pt.trace.json")
    started = time.monotonic()
    result = invoke("open", trace, "--port", "0", "--timeout", "0.3")
    assert time.monotonic() - started < 10
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith(URL_PREFIX + "http://127.0.0.1:")
    assert result.stderr.strip().splitlines()[-1] == "dlprof: nothing fetched the trace in 0.3 s; stopped serving it"
