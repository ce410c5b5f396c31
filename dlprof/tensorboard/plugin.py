"""The *dlprof* tab: a dynamic TensorBoard plugin (setup.cfg's ``tensorboard_plugins`` entry point), so that
``tensorboard --logdir traces`` shows it with no other step.

Its routes, under ``/data/plugin/dlprof/``: ``index.js`` (the tab, an ES module TensorBoard loads in an iframe of
its own), ``runs`` (the runs under the logdir, JSON) and ``report?run=NAME`` (the run's HTML report page; 202 with a
page that refreshes itself while the run is analysed; the CLI's one line when it cannot be).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from dlprof.core.errors import display
from dlprof.tensorboard.runs import ANALYSING, READY, LogdirRun, ReportCache, find_logdir_runs, newest_run

PLUGIN_NAME = "dlprof"
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: How often the page asks again for a report being analysed (seconds).
POLL_S = 1
LINE_CSS = ".dlprof-line { padding: 0 16px; font: 14px sans-serif; }"


def _line_page(title: str, line: str, refresh_s: int | None = None) -> str:
    """A page of one line (the report's place while it is analysed, or when it cannot be)."""
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s is not None else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{refresh}<title>{html.escape(title)}</title>'
        f'<style>{LINE_CSS}</style></head><body><p class="dlprof-line">{html.escape(line)}</p></body></html>\n'
    )


class DlprofPlugin(base_plugin.TBPlugin):
    """dlprof's report of every run under TensorBoard's logdir."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        logdir = getattr(context, "logdir", None)
        # a logdir on a remote file system (gs://, s3://) holds no run dlprof can read
        self._logdir = Path(logdir) if logdir and "://" not in logdir else None
        self._cache = ReportCache()

    def get_plugin_apps(self) -> dict[str, Callable]:
        routes: dict[str, Callable[[wrappers.Request], wrappers.Response]] = {
            "/index.js": self._serve_js,
            "/runs": self._serve_runs,
            "/report": self._serve_report,
        }
        return {route: wrappers.Request.application(serve) for route, serve in routes.items()}

    def is_active(self) -> bool:
        return bool(self._runs())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="dlprof", disable_reload=True)

    def _runs(self) -> list[LogdirRun]:
        return find_logdir_runs(self._logdir) if self._logdir is not None else []

    def _serve_js(self, request: wrappers.Request) -> wrappers.Response:
        script = (STATIC_DIR / "index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, script, "text/javascript")

    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = self._runs()
        listing = {
            "logdir": display(self._logdir) if self._logdir is not None else None,
            "runs": [{"name": run.name, "problem": run.problem} for run in runs],
            "newest": newest_run(runs),
        }
        return http_util.Respond(request, json.dumps(listing), "application/json")

    def _serve_report(self, request: wrappers.Request) -> wrappers.Response:
        name = request.args.get("run", "")
        run = next((run for run in self._runs() if run.name == name), None)
        if run is None:
            logdir = display(self._logdir) if self._logdir is not None else "(none)"
            line = f"dlprof: error: no run {name!r} under the logdir {logdir}; pick one of the runs listed in the tab"
            return http_util.Respond(request, _line_page("dlprof", line), "text/html", code=404)
        outcome = self._cache.get(run)
        if outcome.state == ANALYSING:
            page = _line_page(f"dlprof: {name}", f"analysing {name}…", refresh_s=POLL_S)
            return http_util.Respond(request, page, "text/html", code=202)
        if outcome.state == READY:
            return http_util.Respond(request, outcome.text, "text/html")
        return http_util.Respond(request, _line_page(f"dlprof: {name}", outcome.text), "text/html")
