"""JSON renderer: the stable ``dlprof.report/1`` schema (docs/json-schemas.md documents every field)."""

from __future__ import annotations

import json

from dlprof.report.format import rounded
from dlprof.results.advice import Advice, Headline
from dlprof.results.analysis import (
    CATEGORIES,
    GpuStats,
    JobSummary,
    LoaderStats,
    PlainLaunchStats,
    RankComparison,
    RankSpread,
    Summary,
    UnprofiledStats,
)
from dlprof.results.findings import Finding
from dlprof.results.report import Report, RunReport
from dlprof.results.trials import (
    CpuLevels,
    FaultLevels,
    PaddingTrial,
    TrialsPace,
    TrialsResult,
    TunedRun,
    TuningCost,
    WidthScaling,
)


def _summary(summary: Summary) -> dict:
    return {"mean": rounded(summary.mean_ms), "p50": rounded(summary.p50_ms), "p90": rounded(summary.p90_ms)}


def _plain_launch(plain: PlainLaunchStats) -> dict:
    return {
        "steps": plain.steps,
        "steps_per_s": rounded(plain.plain_steps_per_s),
        "recorded_steps_per_s": rounded(plain.recorded_steps_per_s),
        "after_effect_pct": rounded(plain.after_effect_pct, 2),
        "epoch_steps": plain.epoch_steps,
        "epoch_steps_per_s": rounded(plain.plain_epoch_steps_per_s),
        "recorded_epoch_steps_per_s": rounded(plain.recorded_epoch_steps_per_s),
        "epoch_after_effect_pct": rounded(plain.epoch_after_effect_pct, 2),
    }


def _unprofiled(u: UnprofiledStats) -> dict:
    epoch = u.epoch
    speed = u.speed
    whole = epoch.whole_epoch_speed if epoch is not None else None
    return {
        "reference_steps": u.reference_steps,
        "step_ms": rounded(u.step_ms),
        "steps_per_s": rounded(u.steps_per_s),
        "seconds": rounded(speed.seconds if speed else None),
        "transient_steps": speed.transient_steps if speed else None,
        "spread_pct": rounded(speed.spread_pct if speed else None, 2),
        "trusted": speed.trusted if speed else None,
        "distrust": u.distrust,
        "step_ms_p50": rounded(u.step_ms_p50),
        "profiled_steps": u.profiled_steps,
        "profiled_step_ms": rounded(u.profiled_step_ms),
        "overhead_pct": rounded(u.overhead_pct, 2),
        "consumer_ms": rounded(u.consumer_ms),
        "wait_ms": rounded(u.wait_ms),
        "cpu_ms": rounded(u.cpu_ms),
        "runq_ms": rounded(u.runq_ms),
        "epoch_steps_per_s": rounded(u.epoch_steps_per_s),
        "page_faults": None
        if u.page_faults is None
        else {
            "faults_per_step": rounded(u.page_faults.faults_per_step),
            "sys_ms": rounded(u.page_faults.sys_ms),
            "sys_pct": rounded(u.page_faults.sys_pct, 2),
            "before_faults_per_step": rounded(u.page_faults.before_faults_per_step),
            "before_sys_ms": rounded(u.page_faults.before_sys_ms),
            "volatile": u.page_faults.volatile,
        },
        "plain_launch": None if u.plain_launch is None else _plain_launch(u.plain_launch),
        "epoch": None
        if epoch is None
        else {
            "steps_per_epoch": rounded(epoch.steps_per_epoch),
            "persistent_workers": epoch.persistent_workers,
            "num_workers": epoch.num_workers,
            "restart_ms": rounded(epoch.restart_ms),
            "boundaries_measured": epoch.boundaries_measured,
            "first_batch_ms": rounded(epoch.first_batch_ms),
            "end_ms": rounded(epoch.end_ms),
            "whole_epoch_steps_per_s": rounded(epoch.whole_epoch_steps_per_s),
            "whole_epoch_steps": whole.steps if whole else None,
            "whole_epoch_seconds": rounded(whole.seconds if whole else None),
            "whole_epoch_spread_pct": rounded(whole.spread_pct if whole else None, 2),
            "fork_probe_ms": rounded(epoch.fork_probe_ms),
        },
    }


def _ranks(ranks: RankComparison) -> dict:
    return {
        "slowest_rank": ranks.slowest_rank,
        "slowest_reason": ranks.slowest_reason,
        "extra_data_wait_ms": rounded(ranks.extra_data_wait_ms),
        "collectives": ranks.collectives,
        "ranks": [
            {
                "rank": r.rank,
                "host": r.host,
                "trace_file": r.trace_file,
                "steps": r.steps,
                "step_ms": rounded(r.step_ms),
                "data_wait_ms": rounded(r.data_wait_ms),
                "data_wait_pct": rounded(r.data_wait_pct, 2),
                "collective_ms": rounded(r.collective_ms),
                "own_ms": rounded(r.own_ms),
                "loader_batch_ms": rounded(r.loader_batch_ms),
                "worker_pss_mib": rounded(r.worker_pss_mib),
                "num_workers": r.num_workers,
                "unprofiled_step_ms": rounded(r.unprofiled_step_ms),
                "waited_for_slowest_ms": rounded(ranks.waited_ms.get(r.rank)),
            }
            for r in ranks.ranks
        ],
        "summary": None if ranks.summary is None else _rank_summary(ranks.summary),
    }


def _spread(spread: RankSpread) -> dict:
    return {
        "p50": rounded(spread.p50_ms),
        "p90": rounded(spread.p90_ms),
        "max": rounded(spread.max_ms),
        "max_rank": spread.max_rank,
    }


def _rank_summary(summary: JobSummary) -> dict:
    heat = summary.heat_map
    return {
        "step_ms": _spread(summary.step),
        "data_wait_ms": _spread(summary.data_wait),
        "collective_ms": _spread(summary.collectives),
        "slowest": [
            {
                "rank": s.stats.rank,
                "host": s.stats.host,
                "reason": s.reason,
                "extra_data_wait_ms": rounded(s.extra_data_wait_ms),
                "extra_own_ms": rounded(s.extra_own_ms),
                "waited_by": list(s.waited_by),
                "waited_ms_mean": rounded(s.waited_ms_mean),
                "waited_ms_max": rounded(s.waited_ms_max),
            }
            for s in summary.slowest
        ],
        "nodes": [
            {
                "host": n.host,
                "ranks": list(n.ranks),
                "step_ms_p50": rounded(n.step_ms_p50),
                "slowest_rank": n.slowest_rank,
                "slowest_own_ms": rounded(n.slowest_own_ms),
            }
            for n in summary.nodes
        ],
        "data_wait_histogram": [
            {"lo_ms": rounded(b.lo_ms), "hi_ms": rounded(b.hi_ms), "ranks": list(b.ranks)}
            for b in summary.data_wait_histogram
        ],
        "step_ms_per_step": {
            "ranks": list(heat.ranks),
            "steps": list(heat.steps),
            "step_ms": [[rounded(v) for v in row] for row in heat.step_ms],
        },
    }


def _run(run: RunReport) -> dict:
    info = run.info
    return {
        "name": info.name,
        "trace_file": info.trace_file,
        "status": info.status,
        "device": info.device,
        "num_workers": info.num_workers,
        "batch_size": info.batch_size,
        "pin_memory": info.pin_memory,
        "prefetch_factor": info.prefetch_factor,
        "persistent_workers": info.persistent_workers,
        "usable_cores": info.usable_cores,
        "ram_total_mib": info.ram_total_mib,
        "gpu": info.gpu_name,
        "torch": info.torch_version,
        "batches_per_step": info.batches_per_step,
    }


def _steps(run: RunReport) -> dict:
    steps = run.steps
    return {
        "count": len(steps.steps),
        "step_ms_mean": rounded(steps.step.mean_ms),
        "step_ms_p50": rounded(steps.step.p50_ms),
        "step_ms_p90": rounded(steps.step.p90_ms),
        "data_wait_pct": rounded(steps.data_wait_pct, 2),
        "per_step": [
            {
                "step": s.number,
                "step_ms": rounded(s.step_ms),
                **{f"{c}_ms": rounded(s.category_ms(c)) for c in CATEGORIES},
            }
            for s in steps.steps
        ],
    }


def _loader(loader: LoaderStats) -> dict:
    return {
        "batch_ms": rounded(loader.batch.mean_ms),
        "batch_cpu_ms": rounded(loader.batch_cpu_ms_mean),
        "batch_runq_ms": rounded(loader.batch_runq_ms_mean),
        "fetch_ms": rounded(loader.fetch.mean_ms),
        "tokenize_ms": rounded(loader.tokenize.mean_ms),
        "collate_ms": rounded(loader.collate.mean_ms),
        "fetch_cpu_ms": rounded(loader.fetch_cpu_ms_mean),
        "tokenize_cpu_ms": rounded(loader.tokenize_cpu_ms_mean),
        "collate_cpu_ms": rounded(loader.collate_cpu_ms_mean),
        "cpu_fraction": rounded(loader.cpu_fraction),
        "bound": loader.bound,
        "workers_observed": loader.workers_observed,
        "in_main_process": loader.in_main_process,
        "batches": len(loader.batches),
        "wait_not_ready_ms": rounded(loader.wait.not_ready_ms_mean) if loader.wait else None,
        "wait_ready_ms": rounded(loader.wait.ready_ms_mean) if loader.wait else None,
        "workers": [
            {
                "worker": w.worker,
                "pid": w.pid,
                "batches": w.batches,
                "batch_ms": rounded(w.batch_ms_mean),
                "cpu_ms": rounded(w.cpu_ms_mean),
                "batches_per_s": rounded(w.capacity_per_s),
                "pss_mib": rounded(w.pss_mib_last),
                "pss_growth_mib_per_min": rounded(w.pss_growth_mib_per_min),
            }
            for w in loader.workers
        ],
    }


def _gpu(gpu: GpuStats) -> dict:
    return {
        "busy_pct": rounded(gpu.busy_pct, 2),
        "busy_ms": _summary(gpu.busy),
        "idle_ms": _summary(gpu.idle),
        "idle_data_ms": _summary(gpu.idle_data),
        "idle_launch_ms": _summary(gpu.idle_launch),
        "idle_other_ms": _summary(gpu.idle_other),
        "h2d_ms": _summary(gpu.h2d),
        "h2d_copies": gpu.h2d_copies,
        "h2d_pageable_copies": gpu.h2d_pageable_copies,
        "h2d_pinned_copies": gpu.h2d_pinned_copies,
        "h2d_mib_per_step": rounded(gpu.h2d_mib_per_step),
    }


def _trials(trials: TrialsResult) -> dict:
    return {
        "mode": trials.mode,
        "rounds": trials.rounds,
        "rounds_planned": trials.rounds_planned,
        "basis": trials.basis,
        "runs": [
            {
                "num_workers": r.num_workers,
                "persistent_workers": r.persistent_workers,
                "steps_per_s": rounded(r.steps_per_s),
                "spread_pct": rounded(r.speed.spread_pct if r.speed else None, 2),
                "width_scaled_pct": rounded(r.speed.width_scaled_pct if r.speed else None, 2),
                "epoch_steps_per_s": rounded(r.epoch_steps_per_s),
                "restart_ms": rounded(r.restart_ms),
                "steps_timed": r.speed.steps if r.speed else 0,
                "trusted": r.speed.trusted if r.speed else False,
                "segments": r.segments,
                "predicted_steps_per_s": rounded(r.predicted_steps_per_s),
                "error_pct": rounded(r.error_pct, 2),
                "paced_steps_per_s": rounded(r.paced_steps_per_s),
                "paced_error_pct": rounded(r.paced_error_pct, 2),
                "data_wait_pct": rounded(r.data_wait_pct, 2),
                "workers_pss_mib": rounded(r.workers_pss_mib, 1),
                "over_memory_limit": r.over_memory_limit,
            }
            for r in trials.settings
        ],
        "max_worker_memory_mib": rounded(trials.max_worker_memory_mib, 1),
        "cost": _tuning_cost(trials.cost) if trials.cost is not None else None,
        "tuned": _tuned(trials.tuned) if trials.tuned is not None else None,
        "notes": list(trials.notes),
        "padding": _padding_trial(trials.padding) if trials.padding is not None else None,
        "padding_not_measured": trials.padding_not_measured,
        "width_scaling": _width_scaling(trials.width_scaling) if trials.width_scaling is not None else None,
        "pace": _pace(trials.pace) if trials.pace is not None else None,
    }


def _width_scaling(scaling: WidthScaling) -> dict:
    return {
        "mean_positions": rounded(scaling.mean_positions, 1),
        "ms_per_position": rounded(scaling.ms_per_position, 6),
        "correlation": rounded(scaling.correlation),
        "steps": scaling.steps,
        "lag_steps": scaling.lag_steps,
        "low_pct": rounded(scaling.low_pct, 2),
        "high_pct": rounded(scaling.high_pct, 2),
    }


def _pace(pace: TrialsPace) -> dict:
    return {
        "num_workers": pace.num_workers,
        "persistent_workers": pace.persistent_workers,
        "measured_steps_per_s": rounded(pace.measured_steps_per_s),
        "predicted_steps_per_s": rounded(pace.predicted_steps_per_s),
        "from_reference_steps": pace.from_reference_steps,
        "factor": rounded(pace.factor, 4),
        "moved_pct": rounded(pace.moved_pct, 2),
    }


def _tuning_cost(cost: TuningCost) -> dict:
    return {
        "steps": cost.steps,
        "seconds": rounded(cost.seconds),
        "own_seconds": rounded(cost.own_seconds),
        "num_workers": cost.num_workers,
        "chosen_steps_per_s": rounded(cost.chosen_steps_per_s),
        "own_steps_per_s": rounded(cost.own_steps_per_s),
        "saved_s_per_1000": rounded(cost.saved_s_per_1000),
        "payback_steps": rounded(cost.payback_steps, 0),
        "tuned_steps": cost.tuned_steps,
        "tuned_saved_s": rounded(cost.tuned_saved_s),
    }


def _tuned(tuned: TunedRun) -> dict:
    speed = tuned.speed
    return {
        "mode": tuned.mode,
        "num_workers": tuned.num_workers,
        "persistent_workers": tuned.persistent_workers,
        "first_step": tuned.first_step,
        "steps": tuned.steps,
        "steps_at_setting": tuned.steps_at_setting,
        "steps_per_s": rounded(tuned.steps_per_s),
        "spread_pct": rounded(speed.spread_pct if speed else None, 2),
        "width_scaled_pct": rounded(speed.width_scaled_pct if speed else None, 2),
        "steps_timed": speed.steps if speed else 0,
        "trusted": speed.trusted if speed else False,
        "trial_steps_per_s": rounded(tuned.trial_steps_per_s),
        "trial_persistent_workers": tuned.trial_persistent_workers,
        "change_pct": rounded(tuned.change_pct, 2),
        "held": tuned.held,
        "error": tuned.error,
        "page_faults": _fault_levels(tuned.fault_levels) if tuned.fault_levels is not None else None,
        "cpu": _cpu_levels(tuned.cpu_levels) if tuned.cpu_levels is not None else None,
    }


def _cpu_levels(levels: CpuLevels) -> dict:
    return {
        "cpu_ms_per_step": rounded(levels.cpu_ms, 2),
        "trial_cpu_ms_per_step": rounded(levels.trial_cpu_ms, 2),
        "cores": rounded(levels.cores),
        "trial_cores": rounded(levels.trial_cores),
        "cpu_per_step_moved": levels.cpu_per_step_moved,
    }


def _fault_levels(levels: FaultLevels) -> dict:
    return {
        "faults_per_step": rounded(levels.faults_per_step, 0),
        "sys_ms": rounded(levels.sys_ms, 2),
        "trial_faults_per_step": rounded(levels.trial_faults_per_step, 0),
        "trial_sys_ms": rounded(levels.trial_sys_ms, 2),
        "moved": levels.moved,
    }


def _padding_trial(padding: PaddingTrial) -> dict:
    return {
        "num_workers": padding.num_workers,
        "persistent_workers": padding.persistent_workers,
        "trimmed_pct": rounded(padding.trimmed_pct, 2),
        "trimmed_steps_per_s": rounded(padding.trimmed.steps_per_s if padding.trimmed else None),
        "padded_steps_per_s": rounded(padding.padded_steps_per_s),
        "gain_pct": rounded(padding.gain_pct, 2),
        "trusted": padding.trusted,
    }


def _recommendation(advice: Advice) -> dict:
    return {
        "num_workers": advice.num_workers,
        "pin_memory": advice.pin_memory,
        "prefetch_factor": advice.prefetch_factor,
        "persistent_workers": advice.persistent_workers,
        "bound": advice.bound,
        "verdict": advice.verdict,
        "rests_on": advice.rests_on,
        "model_num_workers": advice.model_num_workers,
        # Only when a Trainer (or ms-swift, LLaMA-Factory) created the DataLoader.
        **({"trainer_arguments": advice.trainer_arguments} if advice.trainer_arguments else {}),
        "predicted": [
            {
                "num_workers": p.num_workers,
                "step_ms": rounded(p.step_ms),
                "steps_per_s": rounded(p.steps_per_s),
                "bound": p.bound,
                "epoch_steps_per_s": rounded(p.epoch_steps_per_s),
                "restart_ms": rounded(p.restart_ms),
            }
            for p in advice.predicted
        ],
        "evidence": advice.evidence,
        "basis": advice.basis,
    }


def headline_document(headline: Headline | None) -> dict | None:
    """The headline object: the first line of the text report, the settings it changes, its gain and its basis."""
    if headline is None:
        return None
    return {
        "text": headline.text,
        "change": headline.change,
        "gain_pct": rounded(headline.gain_pct, 2),
        "basis": headline.basis,
    }


def findings_document(findings: tuple[Finding, ...]) -> list[dict]:
    """The faults of the input pipeline beyond the DataLoader's settings, the largest gain first; [] when none."""
    return [
        {
            "id": f.id,
            "severity": f.severity,
            "title": f.title,
            "evidence": f.evidence,
            "fix": f.fix,
            "gain_pct": rounded(f.gain_pct, 2),
            "gain_basis": f.gain_basis,
        }
        for f in findings
    ]


def run_document(run: RunReport) -> dict:
    """One run's part of the ``dlprof.report/1`` document."""
    steps = run.steps
    return {
        "headline": headline_document(run.advice.headline),
        "findings": findings_document(run.advice.findings),
        "run": _run(run),
        "steps": _steps(run),
        "unprofiled": None if run.unprofiled is None else _unprofiled(run.unprofiled),
        "ranks": None if run.ranks is None else _ranks(run.ranks),
        "missing_ranks": list(run.missing_ranks),
        "breakdown_ms": {c: rounded(steps.categories[c].mean_ms) for c in CATEGORIES},
        "breakdown_p90_ms": {c: rounded(steps.categories[c].p90_ms) for c in CATEGORIES},
        "loader": None if run.loader is None else _loader(run.loader),
        "gpu": None if run.gpu is None else _gpu(run.gpu),
        "trials": None if run.trials is None else _trials(run.trials),
        "recommendation": _recommendation(run.advice),
    }


def render(report: Report) -> str:
    if len(report.runs) == 1:
        document = {"schema": report.schema, "dlprof_version": report.dlprof_version, **run_document(report.runs[0])}
    else:
        runs = [run_document(r) for r in report.runs]
        document = {"schema": report.schema, "dlprof_version": report.dlprof_version, "runs": runs}
    document["skipped"] = [{"path": s.path, "reason": s.reason} for s in report.skipped]
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
