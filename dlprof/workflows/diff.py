"""``dlprof diff RUN_A RUN_B``: the before/after of one change to a training's DataLoader settings.

Each side is analysed as ``dlprof analyze`` would (:func:`dlprof.workflows.analyze.analyze_traces`: of a run
of several ranks, its slowest rank, the one analyze reports); this module lines the two analyses up: which
settings differ, each metric in A and in B with its change, and a one-line verdict. Everything a renderer
prints is computed here (report/diff.py only formats).

``None`` means unknown throughout (a trace without dlprof's manifest or worker spans, a run recorded
without unprofiled reference steps); a change is ``None`` when either side is unknown.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dlprof.core.errors import UsageError
from dlprof.results.diff import DiffResult, DiffRow, DiffRun
from dlprof.results.report import RunReport
from dlprof.trace.discover import find_traces
from dlprof.workflows.analyze import analyze_traces

#: DataLoader settings compared between the runs (fields of :class:`dlprof.core.manifest.LoaderConfig`).
#: Left out: what the run did rather than how it was configured (``iterations``, ``batches``,
#: ``epochs``), ``length`` (follows from the dataset and ``batch_size``), ``id`` and
#: ``num_workers_requested`` (dlprof's own bookkeeping).
DATALOADER_SETTINGS = (
    "num_workers",
    "batch_size",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "drop_last",
    "timeout_s",
    "in_order",
    "start_method",
    "dataset",
    "dataset_len",
    "iterable_dataset",
    "sampler",
    "collate_fn",
)
#: Settings the RunInfo knows even without a manifest's loader (num_workers from the iterator's name).
_INFO_SETTINGS = ("num_workers", "batch_size", "pin_memory", "prefetch_factor", "persistent_workers")
#: Settings that only matter with worker processes (PyTorch leaves them unset with ``num_workers=0``).
_WORKER_ONLY_SETTINGS = ("prefetch_factor", "persistent_workers", "timeout_s", "start_method")

#: Below this change in speed (per cent) the verdict calls the runs equally fast: the rounding of the
#: printed number, not a noise threshold (run-to-run noise is the reader's to judge from the numbers).
SAME_SPEED_PCT = 0.05


def _finite(value: float | None) -> float | None:
    """Unknown for anything a report cannot hold (NaN, infinity)."""
    return value if value is not None and math.isfinite(value) else None


def _row(key: str, metric: str, unit: str, a: float | None, b: float | None) -> DiffRow:
    a, b = _finite(a), _finite(b)
    delta = b - a if a is not None and b is not None else None
    delta_pct = 100 * delta / a if delta is not None and a else None
    return DiffRow(key=key, metric=metric, unit=unit, a=a, b=b, delta=delta, delta_pct=delta_pct)


def _load(path: Path) -> DiffRun:
    """Analyse the one run at ``path`` (a run directory or a trace file), as ``dlprof analyze`` does."""
    runs = find_traces(path)
    if len(runs) > 1:
        names = ", ".join(files[0].parent.name for files in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise UsageError(
            f"{path}: a directory of {len(runs)} runs ({names}); dlprof diff compares two runs: "
            f"give one run directory (e.g. {path / runs[0][0].parent.name}) or one trace file for each side"
        )
    files = runs[0]
    report = analyze_traces(files, files[0].name if path.is_file() else files[0].parent.name)
    if report.ranks is None:
        return DiffRun(name=report.info.name, trace_file=report.info.trace_file, report=report)
    # Several ranks: the slowest one, which sets the job's pace and which dlprof analyze reports.
    return DiffRun(
        name=report.info.name,
        trace_file=report.info.trace_file,
        report=report,
        rank=report.ranks.slowest_rank,
        ranks=len(report.ranks.ranks),
    )


def _worker_pss_mib(run: RunReport) -> float | None:
    """PSS of all worker processes together; 0 when the batches were loaded in the main process."""
    if run.loader is None:
        return None
    workers = [w.pss_mib_last for w in run.loader.workers if w.worker >= 0]
    known = [p for p in workers if p is not None]
    if len(known) < len(workers):
        return None
    return float(sum(known))


def _rows(a: RunReport, b: RunReport) -> tuple[DiffRow, ...]:
    def both(get) -> tuple[float | None, float | None]:
        return get(a), get(b)

    loader = lambda stage: lambda r: getattr(r.loader, stage).mean_ms if r.loader else None
    rows = [
        _row("step_ms", "step time, profiled mean (ms)", "ms", *both(lambda r: r.steps.step.mean_ms)),
        _row(
            "unprofiled_step_ms",
            "step time, unprofiled (ms)",
            "ms",
            *both(lambda r: r.unprofiled.step_ms if r.unprofiled else None),
        ),
        _row(
            "unprofiled_steps_per_s",
            "steps/s, unprofiled",
            "steps/s",
            *both(lambda r: r.unprofiled.steps_per_s if r.unprofiled else None),
        ),
        _row("data_wait_ms", "data wait (ms per step)", "ms", *both(lambda r: r.steps.categories["data_wait"].mean_ms)),
        _row("data_wait_pct", "data wait (% of step)", "%", *both(lambda r: r.steps.data_wait_pct)),
        _row("fetch_ms", "dataset fetch (ms per batch)", "ms", *both(loader("fetch"))),
        _row("tokenize_ms", "tokenizer (ms per batch)", "ms", *both(loader("tokenize"))),
        _row("collate_ms", "collate_fn (ms per batch)", "ms", *both(loader("collate"))),
        _row("batch_ms", "whole batch (ms per batch)", "ms", *both(loader("batch"))),
    ]
    if a.gpu is not None or b.gpu is not None:
        rows.append(
            _row("gpu_idle_ms", "GPU idle (ms per step)", "ms", *both(lambda r: r.gpu.idle.mean_ms if r.gpu else None))
        )
    rows += [
        _row("worker_pss_mib", "worker memory (PSS MiB, all workers)", "MiB", *both(_worker_pss_mib)),
        _row(
            "profiler_overhead_pct",
            "profiler overhead (%)",
            "%",
            *both(lambda r: r.unprofiled.overhead_pct if r.unprofiled else None),
        ),
    ]
    return tuple(rows)


def _settings(run: RunReport) -> dict[str, Any]:
    """Every compared setting of one run; ``None`` where unknown."""
    manifest, info = run.manifest, run.info
    found: dict[str, Any] = dict.fromkeys(DATALOADER_SETTINGS)
    if manifest is not None and manifest.loader is not None:
        found.update({name: getattr(manifest.loader, name) for name in DATALOADER_SETTINGS})
    for name in _INFO_SETTINGS:
        if found[name] is None:
            found[name] = getattr(info, name)
    found["device"] = info.device
    found["command"] = list(manifest.script) if manifest is not None and manifest.script else None
    found["overrides"] = dict(manifest.overrides) if manifest is not None else None
    found["usable_cores"] = info.usable_cores
    found["torch"] = info.torch_version
    return found


def _compare_settings(a: RunReport, b: RunReport) -> tuple[dict[str, tuple[Any, Any]], tuple[str, ...]]:
    sa, sb = _settings(a), _settings(b)
    changed = {k: (sa[k], sb[k]) for k in sa if sa[k] is not None and sb[k] is not None and sa[k] != sb[k]}
    # A setting that only workers use is not unknown in a run without workers: it does not apply there.
    no_workers = lambda s, k: s["num_workers"] == 0 and k in _WORKER_ONLY_SETTINGS
    unknown = tuple(
        k for k in sa if (sa[k] is None) != (sb[k] is None) and not no_workers(sa if sa[k] is None else sb, k)
    )
    return changed, unknown


def _num(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _speed(a: RunReport, b: RunReport) -> tuple[float | None, str, str]:
    """B's change in speed against A (per cent of steps/s), its basis, and the words that say so."""
    sa: float | None
    sb: float | None
    if a.unprofiled is not None and b.unprofiled is not None:
        sa, sb = a.unprofiled.steps_per_s, b.unprofiled.steps_per_s
        basis = "unprofiled steps/s"
        detail = f"unprofiled steps/s {_num(sa)} → {_num(sb)}"
    else:
        ma, mb = a.steps.step.mean_ms, b.steps.step.mean_ms
        basis = "profiled step time"
        missing = " and ".join(side for side, r in (("A", a), ("B", b)) if r.unprofiled is None)
        detail = f"profiled step time {_num(ma)} → {_num(mb)} ms; unprofiled speed unknown for {missing}"
        sa, sb = (1000 / ma if ma > 0 else None), (1000 / mb if mb > 0 else None)
    if sa is None or sb is None or sa <= 0:
        return None, basis, f"speed not comparable ({detail})"
    change = _finite(100 * (sb / sa - 1))
    if change is None:
        return None, basis, f"speed not comparable ({detail})"
    if abs(change) < SAME_SPEED_PCT:
        words = "B is as fast as A"
    else:
        words = f"B is {abs(change):.1f} % {'faster' if change > 0 else 'slower'} than A"
    return change, basis, f"{words} ({detail})"


def diff(path_a: str | Path, path_b: str | Path) -> DiffResult:
    """Compare two runs: what changed in their settings, and what it did to every metric.

    Args:
        path_a: the run before the change: a run directory (``traces/<run>``) or one trace file.
        path_b: the run after the change, likewise.

    Returns:
        The settings that differ, one :class:`DiffRow` per metric (value in A, in B, change, change
        in per cent) and a verdict line, e.g. "B is 23.4 % faster than A (unprofiled steps/s
        10.0 → 12.3), data wait 41.0 → 3.20 ms per step".

    Raises:
        dlprof.core.errors.DlprofError: a path holds no readable trace, or several runs.
    """
    a, b = _load(Path(path_a)), _load(Path(path_b))
    changed, unknown = _compare_settings(a.report, b.report)
    change, basis, speed_words = _speed(a.report, b.report)
    wait_a, wait_b = (r.steps.categories["data_wait"].mean_ms for r in (a.report, b.report))
    verdict = f"{speed_words}, data wait {_num(wait_a)} → {_num(wait_b)} ms per step"
    return DiffResult(
        a=a,
        b=b,
        settings_changed=changed,
        settings_unknown=unknown,
        rows=_rows(a.report, b.report),
        speed_change_pct=change,
        speed_basis=basis,
        verdict=verdict,
    )


__all__ = ["diff"]
