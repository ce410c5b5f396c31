"""The report's tables as pandas DataFrames, for notebooks: one row per step, batch, prediction, trial segment, rank,
finding.

Every frame starts with a ``run`` column (the run's name), so that a report of several runs gives one frame of all
of them. Columns are named as the JSON report's keys (units in the names); unknown is NaN in a number column and
``<NA>`` in an integer, boolean or text one, never 0. The values are the Report's, unrounded: a frame formats nothing
and computes nothing. pandas is imported inside each function, so that ``dlprof analyze`` never loads it.
"""

from __future__ import annotations

import math
import typing

from dlprof.results.analysis import CATEGORIES
from dlprof.results.report import Report

if typing.TYPE_CHECKING:
    import pandas as pd

#: A column's kind: float (NaN for unknown), int, bool and str (``<NA>`` for unknown).
FLOAT, INT, BOOL, STR = "float64", "Int64", "boolean", "string"

STEP_COLUMNS = {"run": STR, "step": INT, "start_us": FLOAT, "step_ms": FLOAT, **{f"{c}_ms": FLOAT for c in CATEGORIES}}
BATCH_COLUMNS = {
    "run": STR,
    "worker": INT,
    "pid": INT,
    "loader": INT,
    "epoch": INT,
    "batch": INT,
    "end_us": FLOAT,
    "batch_ms": FLOAT,
    "batch_cpu_ms": FLOAT,
    "batch_runq_ms": FLOAT,
    "fetch_ms": FLOAT,
    "fetch_cpu_ms": FLOAT,
    "tokenize_ms": FLOAT,
    "tokenize_cpu_ms": FLOAT,
    "collate_ms": FLOAT,
    "collate_cpu_ms": FLOAT,
    "tensors": INT,
}
PREDICTION_COLUMNS = {
    "run": STR,
    "num_workers": INT,
    "step_ms": FLOAT,
    "steps_per_s": FLOAT,
    "bound": STR,
    "epoch_steps_per_s": FLOAT,
    "restart_ms": FLOAT,
    "recommended": BOOL,
}
TRIAL_COLUMNS = {
    "run": STR,
    "num_workers": INT,
    "persistent_workers": BOOL,
    "round": INT,
    "first_step": INT,
    "steps": INT,
    "at_epoch_start": BOOL,
    "trim_padding": BOOL,
    "workers_pss_mib": FLOAT,
    "drain_ms": FLOAT,
    "shutdown_ms": FLOAT,
    "start_ms": FLOAT,
    "first_batch_ms": FLOAT,
    "steps_per_s": FLOAT,
    "steps_timed": INT,
    "transient_steps": INT,
    "seconds": FLOAT,
    "surplus_steps": FLOAT,
    "width_scaled_pct": FLOAT,
    "spread_pct": FLOAT,
    "trusted": BOOL,
}
RANK_COLUMNS = {
    "run": STR,
    "rank": INT,
    "host": STR,
    "trace_file": STR,
    "steps": INT,
    "step_ms": FLOAT,
    "data_wait_ms": FLOAT,
    "data_wait_pct": FLOAT,
    "collective_ms": FLOAT,
    "own_ms": FLOAT,
    "loader_batch_ms": FLOAT,
    "worker_pss_mib": FLOAT,
    "num_workers": INT,
    "unprofiled_step_ms": FLOAT,
    "waited_for_slowest_ms": FLOAT,
    "slowest": BOOL,
}

FINDING_COLUMNS = {
    "run": STR,
    "id": STR,
    "severity": STR,
    "title": STR,
    "evidence": STR,
    "fix": STR,
    "gain_pct": FLOAT,
    "gain_basis": STR,
}


def _known(value: object) -> object:
    """None for unknown: None, NaN or infinity (a number that should never reach a result)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _frame(rows: list[dict[str, object]], columns: dict[str, str]) -> pd.DataFrame:
    import pandas as pd

    def column(name: str, kind: str) -> list[object]:
        values = [_known(row[name]) for row in rows]
        return [math.nan if v is None else v for v in values] if kind == FLOAT else values

    data = {name: pd.array(column(name, kind), dtype=kind) for name, kind in columns.items()}
    return pd.DataFrame(data, columns=list(columns))


def steps(report: Report) -> pd.DataFrame:
    """Every profiled step of every run: its time and its split into the categories, ms."""
    rows: list[dict[str, object]] = [
        {
            "run": run.info.name,
            "step": s.number,
            "start_us": s.start_us,
            "step_ms": s.step_ms,
            **{f"{c}_ms": s.category_ms(c) for c in CATEGORIES},
        }
        for run in report.runs
        for s in run.steps.steps
    ]
    return _frame(rows, STEP_COLUMNS)


def batches(report: Report) -> pd.DataFrame:
    """Every batch the loader processes made (worker -1: the main process): its wall time (``batch_ms``), CPU time,
    time waiting for a core, and each stage's wall and CPU time, ms. No rows for a run without dlprof's spans."""
    rows: list[dict[str, object]] = []
    for run in report.runs:
        for b in run.loader.batches if run.loader is not None else []:
            loader, epoch, number = b.batch
            rows.append(
                {
                    "run": run.info.name,
                    "worker": b.worker,
                    "pid": b.pid,
                    "loader": loader,
                    "epoch": epoch,
                    "batch": number,
                    "end_us": b.end_us,
                    "batch_ms": b.wall_ms,
                    "batch_cpu_ms": b.cpu_ms,
                    "batch_runq_ms": b.runq_ms,
                    "fetch_ms": b.fetch_ms,
                    "fetch_cpu_ms": b.fetch_cpu_ms,
                    "tokenize_ms": b.tokenize_ms,
                    "tokenize_cpu_ms": b.tokenize_cpu_ms,
                    "collate_ms": b.collate_ms,
                    "collate_cpu_ms": b.collate_cpu_ms,
                    "tensors": b.tensors,
                }
            )
    return _frame(rows, BATCH_COLUMNS)


def predictions(report: Report) -> pd.DataFrame:
    """Every num_workers the model predicted for: the steady step and speed, the bound, the speed over whole epochs
    and the restart; ``recommended`` marks the count the advice recommends."""
    rows: list[dict[str, object]] = [
        {
            "run": run.info.name,
            "num_workers": p.num_workers,
            "step_ms": p.step_ms,
            "steps_per_s": p.steps_per_s,
            "bound": p.bound,
            "epoch_steps_per_s": p.epoch_steps_per_s,
            "restart_ms": p.restart_ms,
            "recommended": p.num_workers == run.advice.num_workers,
        }
        for run in report.runs
        for p in run.advice.predicted
    ]
    return _frame(rows, PREDICTION_COLUMNS)


def trials(report: Report) -> pd.DataFrame:
    """Every segment of the in-process trials (``--try-workers``): its setting, round and place in the step clock
    (``steps`` with its refill transient), the switch's timings, and its own steady speed (``steps_timed`` steps in
    ``seconds``, less the ``surplus_steps`` a queue made earlier carried, scaled by ``width_scaled_pct`` to the run's
    mean batch where batch widths vary); a setting's speed in the JSON report combines its segments'. No rows for a run
    without trials."""
    rows: list[dict[str, object]] = []
    for run in report.runs:
        for measured in run.trials.segments if run.trials is not None else ():
            s, speed = measured.segment, measured.speed
            rows.append(
                {
                    "run": run.info.name,
                    "num_workers": s.num_workers,
                    "persistent_workers": s.persistent_workers,
                    "round": s.round,
                    "first_step": s.first_step,
                    "steps": s.steps,
                    "at_epoch_start": s.at_epoch_start,
                    "trim_padding": s.trim_padding,
                    "workers_pss_mib": measured.workers_pss_mib,
                    "drain_ms": s.drain_ms,
                    "shutdown_ms": s.shutdown_ms,
                    "start_ms": s.start_ms,
                    "first_batch_ms": s.first_batch_ms,
                    "steps_per_s": speed.steps_per_s if speed else None,
                    "steps_timed": speed.steps if speed else None,
                    "transient_steps": speed.transient_steps if speed else None,
                    "seconds": speed.seconds if speed else None,
                    "surplus_steps": speed.surplus_steps if speed else None,
                    "width_scaled_pct": speed.width_scaled_pct if speed else None,
                    "spread_pct": speed.spread_pct if speed else None,
                    "trusted": speed.trusted if speed else None,
                }
            )
    return _frame(rows, TRIAL_COLUMNS)


def ranks(report: Report) -> pd.DataFrame:
    """Every rank of a run of several ranks, ms per profiled step; ``slowest`` marks the rank the others wait for.
    No rows for a run of one rank (its steps are in :func:`steps`)."""
    rows: list[dict[str, object]] = []
    for run in report.runs:
        comparison = run.ranks
        for r in comparison.ranks if comparison is not None else []:
            assert comparison is not None
            rows.append(
                {
                    "run": run.info.name,
                    "rank": r.rank,
                    "host": r.host,
                    "trace_file": r.trace_file,
                    "steps": r.steps,
                    "step_ms": r.step_ms,
                    "data_wait_ms": r.data_wait_ms,
                    "data_wait_pct": r.data_wait_pct,
                    "collective_ms": r.collective_ms,
                    "own_ms": r.own_ms,
                    "loader_batch_ms": r.loader_batch_ms,
                    "worker_pss_mib": r.worker_pss_mib,
                    "num_workers": r.num_workers,
                    "unprofiled_step_ms": r.unprofiled_step_ms,
                    "waited_for_slowest_ms": comparison.waited_ms.get(r.rank),
                    "slowest": r.rank == comparison.slowest_rank,
                }
            )
    return _frame(rows, RANK_COLUMNS)


def findings(report: Report) -> pd.DataFrame:
    """Every finding of every run (a fault of the input pipeline beyond the DataLoader's settings), the largest gain
    first within a run: its id, severity, title, evidence, fix, and its gain with what that rests on (``gain_pct`` NaN
    where no gain in speed can be told). No rows for a run without findings."""
    rows: list[dict[str, object]] = [
        {
            "run": run.info.name,
            "id": f.id,
            "severity": f.severity,
            "title": f.title,
            "evidence": f.evidence,
            "fix": f.fix,
            "gain_pct": f.gain_pct,
            "gain_basis": f.gain_basis,
        }
        for run in report.runs
        for f in run.advice.findings
    ]
    return _frame(rows, FINDING_COLUMNS)


def _scoped_css(css: str, scope: str) -> str:
    """The HTML report's style sheet applied inside ``scope`` only: a notebook's own page keeps its style."""
    rules = []
    for selectors, declarations in (rule.split("{", 1) for rule in css.split("}") if "{" in rule):
        scoped = [
            scope if s in ("body", "main") else f"{scope} {s}"
            for s in (part.strip() for part in selectors.split(","))
            if s != ":root"
        ]
        if scoped:
            rules.append(f"{', '.join(scoped)} {{{declarations}}}")
    return "\n".join(rules)


def html_body(report: Report) -> str:
    """The HTML report's page without its head (``_repr_html_`` in Jupyter): its content inside a ``div`` that its
    style sheet is scoped to."""
    from dlprof.report import html, page

    document = html.render(report)
    content = document.split("<main>\n", 1)[1].rsplit("\n</main>", 1)[0]
    css = _scoped_css(page.CSS, ".dlprof-report")
    return f'<div class="dlprof-report"><style>{css}</style>\n{content}\n</div>'
