"""``dlprof open RUN|TRACE``: a trace opened in the Perfetto UI, the way Perfetto's own ``open_trace_in_ui`` does.

The trace file is served once, as it is on disk (a ``.json.gz`` as its gzip bytes: the UI unpacks it), by an HTTP
server on 127.0.0.1 that answers with ``Access-Control-Allow-Origin: https://ui.perfetto.dev``; the browser is
opened at ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:<port>/<file>``, which fetches it. The server ends
once the file has been sent whole, on Ctrl-C, or after a timeout. Of a run of several ranks, the rank ``dlprof
analyze`` reports (the slowest) is opened unless ``--rank`` says which.
"""

from __future__ import annotations

import errno
import http.server
import os
import shutil
import socketserver
import sys
import time
import urllib.parse
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlprof.core.errors import TraceNotFoundError, UsageError, display
from dlprof.report.common import rank_set
from dlprof.trace.discover import TRACE_SUFFIXES, find_traces, is_trace_file, load_run
from dlprof.workflows.analyze import analyze_traces

PERFETTO_ORIGIN = "https://ui.perfetto.dev"
#: The port Perfetto's own tool serves on: the only one besides the UI's own that its content security policy lets
#: the page fetch from.
PERFETTO_PORT = 9001
#: How long the server waits for the UI to fetch the trace before it gives up.
DEFAULT_TIMEOUT_S = 300.0
#: Browsers that run in the terminal: they cannot run the Perfetto UI, and would take the terminal over.
_CONSOLE_BROWSERS = frozenset({"www-browser", "links", "elinks", "lynx", "w3m"})
#: How often the waiting server looks at its deadline (seconds).
_POLL_S = 0.5

#: What :func:`open_in_perfetto` ends with.
SERVED, TIMED_OUT, INTERRUPTED = "served", "timed out", "interrupted"


@dataclass(frozen=True)
class TraceToOpen:
    """The trace file to open, and which rank of its run it is."""

    trace: Path
    #: Its rank; None when the run has one trace.
    rank: int | None = None
    #: Every rank of the run (empty when it has one trace).
    ranks: tuple[int, ...] = ()
    #: Chosen as the rank ``dlprof analyze`` reports (no ``--rank``).
    slowest: bool = False


def _one_run(path: Path) -> list[Path]:
    """The trace files of the one run at ``path`` (a trace file or a run directory)."""
    if path.is_file() and not is_trace_file(path):
        raise TraceNotFoundError(
            f"{display(path)}: not a trace file ({', '.join(TRACE_SUFFIXES)}); give a run directory (traces/<run>) or"
            " a trace file"
        )
    runs = find_traces(path)
    if len(runs) > 1:
        names = ", ".join(display(files[0].parent.name) for files in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise UsageError(
            f"{display(path)}: a directory of {len(runs)} runs ({names}); dlprof open opens one trace: give one run"
            f" directory (e.g. {display(runs[0][0].parent)}) or one trace file"
        )
    return runs[0]


def _only_rank(trace: Path, rank: int | None) -> TraceToOpen:
    """The one trace of a run, checked against ``--rank`` when given (its rank read from the trace)."""
    if rank is None:
        return TraceToOpen(trace)
    own = load_run(trace).rank
    own = 0 if own is None else own  # as analyze counts a trace without a rank
    if own != rank:
        raise UsageError(f"--rank {rank}: not in {display(trace)}, which holds rank {own} only; drop --rank")
    return TraceToOpen(trace, own, (own,))


def trace_to_open(path: Path, rank: int | None = None) -> TraceToOpen:
    """The trace file to open for ``path``: a trace file itself, or the one trace of a run directory; of a run of
    several ranks, rank ``rank``, by default the rank ``dlprof analyze`` reports (every rank is analysed to find it).

    Raises:
        TraceNotFoundError: ``path`` does not exist, holds no trace, or is not a trace file.
        UsageError: ``path`` holds several runs, or ``rank`` is not one of its ranks.
    """
    files = _one_run(path)
    if len(files) == 1:
        return _only_rank(files[0], rank)
    report = analyze_traces(files, files[0].parent.name, processes=None)
    if report.ranks is None:  # several files, one rank among them: the one analyze kept
        kept = [f for f in files if display(f) == report.info.trace_file]
        return _only_rank(kept[0] if kept else files[0], rank)
    by_name = {display(f.name): f for f in files}  # a rank's row names its file without the directory
    ranks = {row.rank: by_name[row.trace_file] for row in report.ranks.ranks}
    chosen = report.ranks.slowest_rank if rank is None else rank
    if chosen not in ranks:
        raise UsageError(
            f"--rank {rank}: not in {display(path)}, whose ranks are {rank_set(sorted(ranks))}; give one of them"
        )
    return TraceToOpen(ranks[chosen], chosen, tuple(sorted(ranks)), slowest=rank is None)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers GET (and HEAD) of the one file, CORS preflights, and 404 to anything else."""

    server: _OneShotServer
    #: A client that connects and sends nothing cannot hold the one-at-a-time server for ever (seconds).
    timeout = 30

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", PERFETTO_ORIGIN)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def do_OPTIONS(self) -> None:
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        if asked := self.headers.get("Access-Control-Request-Headers"):
            self.send_header("Access-Control-Allow-Headers", asked)
        # Chrome asks before a public page may reach a loopback address (Private Network Access).
        if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def _answer(self, send_body: bool) -> None:
        trace = self.server.trace
        if urllib.parse.unquote(urllib.parse.urlsplit(self.path).path) != "/" + trace.name:
            self.send_error(404, "Not found")
            return
        try:
            f = trace.open("rb")
        except OSError as error:  # gone or unreadable since it was chosen
            self.send_error(404, f"{trace.name}: {error.strerror}")
            return
        try:
            with f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip" if trace.suffix == ".gz" else "application/json")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                if send_body:
                    shutil.copyfileobj(f, self.wfile, 1 << 20)
                    self.wfile.flush()
                    self.server.served = True
        except (BrokenPipeError, ConnectionResetError):  # the page went away mid-file: it may ask again
            return

    def log_message(self, format: str, *args) -> None:
        """Quiet: the command's own lines say what happened."""


class _OneShotServer(http.server.HTTPServer):
    """An HTTP server on 127.0.0.1 that serves one file, one request at a time, until it has been sent whole."""

    def __init__(self, trace: Path, port: int) -> None:
        self.trace = trace
        self.served = False
        super().__init__(("127.0.0.1", port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer's own looks the host's name up (DNS), which can take seconds; the name is known.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request, client_address) -> None:
        """A request that failed (the client left) leaves no traceback: the server waits for the next one."""

    def serve_until_sent(self, timeout_s: float) -> str:
        """Answer requests until the file has been sent whole (:data:`SERVED`) or ``timeout_s`` has passed
        (:data:`TIMED_OUT`)."""
        deadline = time.monotonic() + timeout_s
        while not self.served:
            left = deadline - time.monotonic()
            if left <= 0:
                return TIMED_OUT
            self.timeout = min(left, _POLL_S)
            self.handle_request()
        return SERVED


def _listen(trace: Path, port: int, say: Callable[[str, bool], None]) -> _OneShotServer:
    """The server, on ``port`` or, when that is taken, on a free port (said in one line)."""
    try:
        return _OneShotServer(trace, port)
    except OSError as error:
        if error.errno != errno.EADDRINUSE or port == 0:
            raise UsageError(
                f"--port {port}: cannot listen on 127.0.0.1:{port} ({error.strerror}); give another port"
            ) from None
    server = _OneShotServer(trace, 0)
    say(
        f"dlprof: port {port} is taken; serving on 127.0.0.1:{server.server_port} instead (ui.perfetto.dev may"
        f" fetch only from port {PERFETTO_PORT}: if the page cannot load the trace, free port {port} and run this"
        " again)",
        True,
    )
    return server


def perfetto_url(trace: Path, port: int) -> str:
    """The Perfetto UI's address that opens ``trace`` served on 127.0.0.1:``port``."""
    return f"{PERFETTO_ORIGIN}/#!/?url=http://127.0.0.1:{port}/{urllib.parse.quote(trace.name)}"


def _browser() -> webbrowser.BaseBrowser | None:
    """The browser ``webbrowser`` would start, None when there is none that can show the UI (a terminal without a
    display, or only a browser that runs in the terminal)."""
    desktop = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("BROWSER")
    if os.name == "posix" and sys.platform != "darwin" and not desktop:
        return None
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return None
    return None if getattr(browser, "name", "") in _CONSOLE_BROWSERS else browser


def _rank_line(target: TraceToOpen) -> str | None:
    if target.rank is None or len(target.ranks) < 2:
        return None
    why = ": the slowest, which dlprof analyze reports (--rank N for another)" if target.slowest else ""
    return f"dlprof: rank {target.rank} of ranks {rank_set(target.ranks)}{why}"


def open_in_perfetto(
    path: Path,
    *,
    rank: int | None = None,
    port: int = PERFETTO_PORT,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    print_url: bool = False,
    say: Callable[[str, bool], None],
) -> str:
    """Serve the trace of ``path`` (see :func:`trace_to_open`) once on 127.0.0.1:``port`` and open it in the Perfetto
    UI: in the browser, or with ``print_url`` (or no browser) the UI's address on stdout. ``say(line, to_stderr)``
    prints each line.

    Returns:
        :data:`SERVED`, :data:`TIMED_OUT` or :data:`INTERRUPTED`.

    Raises:
        TraceNotFoundError, UsageError: as :func:`trace_to_open`; the port cannot be listened on.
    """
    target = trace_to_open(path, rank)
    if line := _rank_line(target):
        say(line, True)
    server = _listen(target.trace, port, say)
    try:
        url = perfetto_url(target.trace, server.server_port)
        browser = None if print_url else _browser()
        if browser is not None and browser.open_new_tab(url):
            say(f"dlprof: opened {url} in the browser", True)
        else:
            say(url, False)
        say(
            f"dlprof: serving {display(target.trace)} once on 127.0.0.1:{server.server_port} until the page fetches"
            f" it (at most {timeout_s:g} s; Ctrl-C stops)",
            True,
        )
        return server.serve_until_sent(timeout_s)
    except KeyboardInterrupt:
        return INTERRUPTED
    finally:
        server.server_close()


__all__ = ["DEFAULT_TIMEOUT_S", "PERFETTO_PORT", "TraceToOpen", "open_in_perfetto", "perfetto_url", "trace_to_open"]
