"""JSON renderer: the stable ``dlprof.report/1`` schema (README.md documents every field)."""

from __future__ import annotations

import json

from dlprof.analysis.ranks import RankComparison
from dlprof.analysis.stats import Summary
from dlprof.analysis.steps import CATEGORIES
from dlprof.analysis.unprofiled import UnprofiledStats
from dlprof.workflows.analyze import Report, RunReport


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _summary(summary: Summary) -> dict:
    return {"mean": _r(summary.mean_ms), "p50": _r(summary.p50_ms), "p90": _r(summary.p90_ms)}


def _unprofiled(u: UnprofiledStats) -> dict:
    epoch = u.epoch
    return {
        "reference_steps": u.reference_steps,
        "step_ms": _r(u.step_ms),
        "steps_per_s": _r(u.steps_per_s),
        "step_ms_p50": _r(u.step_ms_p50),
        "profiled_steps": u.profiled_steps,
        "profiled_step_ms": _r(u.profiled_step_ms),
        "overhead_pct": _r(u.overhead_pct, 2),
        "consumer_ms": _r(u.consumer_ms),
        "wait_ms": _r(u.wait_ms),
        "cpu_ms": _r(u.cpu_ms),
        "runq_ms": _r(u.runq_ms),
        "epoch_steps_per_s": _r(u.epoch_steps_per_s),
        "epoch": None
        if epoch is None
        else {
            "steps_per_epoch": _r(epoch.steps_per_epoch),
            "persistent_workers": epoch.persistent_workers,
            "num_workers": epoch.num_workers,
            "restart_ms": _r(epoch.restart_ms),
            "boundaries_measured": epoch.boundaries_measured,
            "first_batch_ms": _r(epoch.first_batch_ms),
            "end_ms": _r(epoch.end_ms),
            "whole_epoch_steps_per_s": _r(epoch.whole_epoch_steps_per_s),
            "fork_probe_ms": _r(epoch.fork_probe_ms),
        },
    }


def _ranks(ranks: RankComparison) -> dict:
    return {
        "slowest_rank": ranks.slowest_rank,
        "slowest_reason": ranks.slowest_reason,
        "extra_data_wait_ms": _r(ranks.extra_data_wait_ms),
        "collectives": ranks.collectives,
        "ranks": [
            {
                "rank": r.rank,
                "trace_file": r.trace_file,
                "steps": r.steps,
                "step_ms": _r(r.step_ms),
                "data_wait_ms": _r(r.data_wait_ms),
                "data_wait_pct": _r(r.data_wait_pct, 2),
                "collective_ms": _r(r.collective_ms),
                "own_ms": _r(r.own_ms),
                "loader_batch_ms": _r(r.loader_batch_ms),
                "worker_pss_mib": _r(r.worker_pss_mib),
                "num_workers": r.num_workers,
                "unprofiled_step_ms": _r(r.unprofiled_step_ms),
                "waited_for_slowest_ms": _r(ranks.waited_ms.get(r.rank)),
            }
            for r in ranks.ranks
        ],
    }


def run_document(run: RunReport) -> dict:
    info, steps, loader, gpu, advice = run.info, run.steps, run.loader, run.gpu, run.advice
    return {
        "run": {
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
        },
        "steps": {
            "count": len(steps.steps),
            "step_ms_mean": _r(steps.step.mean_ms),
            "step_ms_p50": _r(steps.step.p50_ms),
            "step_ms_p90": _r(steps.step.p90_ms),
            "data_wait_pct": _r(steps.data_wait_pct, 2),
            "per_step": [
                {"step": s.number, "step_ms": _r(s.step_ms), **{f"{c}_ms": _r(s.category_ms(c)) for c in CATEGORIES}}
                for s in steps.steps
            ],
        },
        "unprofiled": None if run.unprofiled is None else _unprofiled(run.unprofiled),
        "ranks": None if run.ranks is None else _ranks(run.ranks),
        "breakdown_ms": {c: _r(steps.categories[c].mean_ms) for c in CATEGORIES},
        "breakdown_p90_ms": {c: _r(steps.categories[c].p90_ms) for c in CATEGORIES},
        "loader": None
        if loader is None
        else {
            "batch_ms": _r(loader.batch.mean_ms),
            "batch_cpu_ms": _r(loader.batch_cpu_ms_mean),
            "batch_runq_ms": _r(loader.batch_runq_ms_mean),
            "fetch_ms": _r(loader.fetch.mean_ms),
            "tokenize_ms": _r(loader.tokenize.mean_ms),
            "collate_ms": _r(loader.collate.mean_ms),
            "fetch_cpu_ms": _r(loader.fetch_cpu_ms_mean),
            "tokenize_cpu_ms": _r(loader.tokenize_cpu_ms_mean),
            "collate_cpu_ms": _r(loader.collate_cpu_ms_mean),
            "cpu_fraction": _r(loader.cpu_fraction),
            "bound": loader.bound,
            "workers_observed": loader.workers_observed,
            "in_main_process": loader.in_main_process,
            "batches": len(loader.batches),
            "wait_not_ready_ms": _r(loader.wait.not_ready_ms_mean) if loader.wait else None,
            "wait_ready_ms": _r(loader.wait.ready_ms_mean) if loader.wait else None,
            "workers": [
                {
                    "worker": w.worker,
                    "pid": w.pid,
                    "batches": w.batches,
                    "batch_ms": _r(w.batch_ms_mean),
                    "cpu_ms": _r(w.cpu_ms_mean),
                    "batches_per_s": _r(w.capacity_per_s),
                    "pss_mib": _r(w.pss_mib_last),
                    "pss_growth_mib_per_min": _r(w.pss_growth_mib_per_min),
                }
                for w in loader.workers
            ],
        },
        "gpu": None
        if gpu is None
        else {
            "busy_pct": _r(gpu.busy_pct, 2),
            "busy_ms": _summary(gpu.busy),
            "idle_ms": _summary(gpu.idle),
            "idle_data_ms": _summary(gpu.idle_data),
            "idle_launch_ms": _summary(gpu.idle_launch),
            "idle_other_ms": _summary(gpu.idle_other),
            "h2d_ms": _summary(gpu.h2d),
            "h2d_copies": gpu.h2d_copies,
            "h2d_pageable_copies": gpu.h2d_pageable_copies,
            "h2d_pinned_copies": gpu.h2d_pinned_copies,
            "h2d_mib_per_step": _r(gpu.h2d_mib_per_step),
        },
        "recommendation": {
            "num_workers": advice.num_workers,
            "pin_memory": advice.pin_memory,
            "prefetch_factor": advice.prefetch_factor,
            "persistent_workers": advice.persistent_workers,
            "bound": advice.bound,
            "verdict": advice.verdict,
            # Only when a Trainer (or ms-swift, LLaMA-Factory) created the DataLoader.
            **({"trainer_arguments": advice.trainer_arguments} if advice.trainer_arguments else {}),
            "predicted": [
                {
                    "num_workers": p.num_workers,
                    "step_ms": _r(p.step_ms),
                    "steps_per_s": _r(p.steps_per_s),
                    "bound": p.bound,
                    "epoch_steps_per_s": _r(p.epoch_steps_per_s),
                    "restart_ms": _r(p.restart_ms),
                }
                for p in advice.predicted
            ],
            "evidence": advice.evidence,
            "basis": advice.basis,
        },
    }


def render(report: Report) -> str:
    if len(report.runs) == 1:
        document = {"schema": report.schema, **run_document(report.runs[0])}
    else:
        document = {"schema": report.schema, "runs": [run_document(r) for r in report.runs]}
    document["skipped"] = [{"path": s.path, "reason": s.reason} for s in report.skipped]
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
