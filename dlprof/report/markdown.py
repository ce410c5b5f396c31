"""Markdown renderer, for a GitHub issue: summary table, recommendation with evidence, predictions, details
collapsed."""

from __future__ import annotations

from dlprof.report.common import (
    NODES_HEADER,
    NODES_SHOWN,
    PREDICTED_HEADER,
    RANKS_HEADER,
    SLOWEST_HEADER,
    SPREAD_HEADER,
    TRIALS_HEADER,
    breakdown_rows,
    evidence_line,
    headline_line,
    known,
    loader_rows,
    missing_ranks_line,
    node_rows,
    nodes_heading,
    predicted_rows,
    rank_count,
    rank_rows,
    ranks_heading,
    ranks_line,
    reason_rule,
    recommendation_line,
    rests_on_line,
    setting,
    skipped_line,
    slowest_heading,
    slowest_rows,
    spread_rows,
    summarized,
    trials_heading,
    trials_rows,
)
from dlprof.report.findings import FINDINGS_HEADING, finding_fix, finding_title
from dlprof.report.format import ms, per_s, rate
from dlprof.report.speed import epoch_line, page_faults_line, plain_launch_line, unprofiled_line
from dlprof.report.tuning import status_note, tuned_line, tuning_cost_line
from dlprof.results.report import Report, RunReport


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _run(run: RunReport) -> list[str]:
    info, steps, loader, gpu, advice = run.info, run.steps, run.loader, run.gpu, run.advice
    lines = [f"**{headline_line(run)}**", ""]
    lines += [f"{e}", ""] if (e := evidence_line(run)) else []
    lines += _findings(run)
    lines += [f"### dlprof: `{info.name}`", ""]
    if note := status_note(info):
        lines += [f"**Note:** {note}.", ""]
    if missing := missing_ranks_line(run):
        lines += [f"**Note:** {missing}.", ""]
    lines += _table(
        ["", "value"],
        [
            ["device", info.device + (f" ({info.gpu_name})" if info.gpu_name else "")],
            [
                "DataLoader",
                (
                    f"num_workers={known(info.num_workers)}, batch_size={known(info.batch_size)},"
                    f" pin_memory={known(info.pin_memory)}, prefetch_factor={known(info.prefetch_factor)},"
                    f" persistent_workers={known(info.persistent_workers)}"
                ),
            ],
            ["usable cores", known(info.usable_cores)],
            [
                "steps",
                (
                    f"{len(steps.steps)} recorded, {steps.step.mean_ms:.2f} ms mean (p90 {steps.step.p90_ms:.2f}),"
                    f" {per_s(steps.step.mean_ms)} steps/s (profiled)"
                ),
            ],
            *[
                [label, line]
                for label, line in (
                    ("unprofiled", unprofiled_line(run)),
                    ("plain launch", plain_launch_line(run)),
                    ("epochs", epoch_line(run)),
                    ("page faults", page_faults_line(run)),
                )
                if line
            ],
        ],
    )
    lines += _ranks(run)
    lines += ["", "**Recommendation:** `" + recommendation_line(advice) + "`", ""]
    if advice.trainer_arguments:  # a Trainer (or ms-swift, LLaMA-Factory) created the DataLoader
        lines += ["**Trainer arguments:** `" + advice.trainer_arguments + "`", ""]
    rests_on = rests_on_line(run)
    if rests_on:
        lines += [f"The recommended num_workers {rests_on}.", ""]
    lines += [f"- {e}" for e in advice.evidence]
    lines += _trials(run)
    if advice.predicted:
        lines += ["", "Predicted throughput:", ""]
        lines += _table(PREDICTED_HEADER, predicted_rows(advice, " ←"))
    lines += ["", "<details><summary>Step breakdown, loader and GPU details</summary>", ""]
    lines += _table(["ms per step", "mean", "p50", "p90", "%"], breakdown_rows(steps, "**step**"))
    lines.append("")
    if loader is None:
        lines.append("Loader: unknown (no worker spans; record with `dlprof record`).")
    else:
        lines += _table(["per batch", "wall ms", "CPU ms"], loader_rows(loader))
        lines += [
            "",
            (
                f"CPU/wall {loader.cpu_fraction:.2f} ({loader.bound}-bound), {len(loader.batches)} batches, "
                f"{'main process' if loader.in_main_process else f'{loader.workers_observed} workers'}."
            ),
        ]
        workers = list(loader.workers)
        lines += [""] + _table(
            ["process", "batches", "ms/batch", "batches/s", "PSS MiB", "PSS growth MiB/min"],
            [
                [
                    "main" if w.worker < 0 else f"worker {w.worker}",
                    str(w.batches),
                    ms(w.batch_ms_mean),
                    rate(w.capacity_per_s),
                    ms(w.pss_mib_last),
                    ms(w.pss_growth_mib_per_min),
                ]
                for w in workers
            ],
        )
    if gpu is not None:
        lines += [
            "",
            *_table(
                ["GPU, ms per step", "mean", "p90"],
                [
                    ["busy", ms(gpu.busy.mean_ms), ms(gpu.busy.p90_ms)],
                    ["idle", ms(gpu.idle.mean_ms), ms(gpu.idle.p90_ms)],
                    ["idle: waiting for data", ms(gpu.idle_data.mean_ms), ms(gpu.idle_data.p90_ms)],
                    ["idle: waiting for the host to launch", ms(gpu.idle_launch.mean_ms), ms(gpu.idle_launch.p90_ms)],
                    ["idle: other", ms(gpu.idle_other.mean_ms), ms(gpu.idle_other.p90_ms)],
                    ["host-to-device copies", ms(gpu.h2d.mean_ms), ms(gpu.h2d.p90_ms)],
                ],
            ),
        ]
    if advice.basis:
        lines += ["", "What this rests on:", ""] + [f"- {b}" for b in advice.basis]
    lines += ["", "</details>"]
    return lines


def _findings(run: RunReport) -> list[str]:
    """Faults of the input pipeline beyond the DataLoader's settings, each with its evidence and fix (a line break
    between them: two trailing spaces); nothing when there are none."""
    findings = run.advice.findings
    if not findings:
        return []
    lines = [f"**{FINDINGS_HEADING}:**", ""]
    lines += [f"- **{finding_title(f)}**  \n  {f.evidence}  \n  {finding_fix(f)}" for f in findings]
    return lines + [""]


def _ranks(run: RunReport) -> list[str]:
    """Every rank side by side, or for a job of many ranks the ranks summed up; nothing for one rank."""
    if run.ranks is None:
        return []
    if summarized(run.ranks):
        return _ranks_summary(run)
    lines = [
        "",
        f"**Ranks** ({rank_count(run)}; ms per step, profiled; ★ the slowest, which sets the job's pace):",
        "",
    ]
    lines += _table(RANKS_HEADER, rank_rows(run.ranks, " ★"))
    return lines + ["", f"**{ranks_line(run.ranks)}.** The rest of this report is rank {run.ranks.slowest_rank}'s."]


def _ranks_summary(run: RunReport) -> list[str]:
    """A job of many ranks summed up, with every rank's row collapsed."""
    ranks = run.ranks
    assert ranks is not None and ranks.summary is not None  # called where summarized(ranks)
    summary = ranks.summary
    shown = summary.nodes[:NODES_SHOWN]
    lines = ["", f"**Ranks** ({ranks_heading(run)}):", ""]
    lines += _table(SPREAD_HEADER, spread_rows(summary))
    lines += ["", f"{slowest_heading(summary)}, ★ the slowest:", ""]
    lines += _table(SLOWEST_HEADER, slowest_rows(summary, " ★"))
    lines += ["", f"_{reason_rule()}._", "", f"{nodes_heading(summary, len(shown))}:", ""]
    lines += _table(NODES_HEADER, node_rows(shown))
    lines += ["", f"**{ranks_line(ranks, compact=True)}.** The rest of this report is rank {ranks.slowest_rank}'s."]
    lines += ["", f"<details><summary>Every rank ({len(ranks.ranks)})</summary>", ""]
    lines += _table(RANKS_HEADER, rank_rows(ranks, " ★"))
    lines += ["", "</details>"]
    return lines


def _trials(run: RunReport) -> list[str]:
    """The settings the in-process trials measured, against the predictions; nothing for a run without trials."""
    if run.trials is None:
        return []
    lines = ["", f"**{trials_heading(run.trials)}:**", ""]
    lines += _table(TRIALS_HEADER, trials_rows(run, " ←"))
    for line in (tuned_line(run.trials), tuning_cost_line(run.trials)):
        lines += ["", line[0].upper() + line[1:] + "."] if line else []
    if run.trials.notes:
        lines += [""] + [f"- {note}" for note in run.trials.notes]
    return lines


def render(report: Report) -> str:
    lines: list[str] = []
    if len(report.runs) > 1:
        lines += [f"- `{r.info.name}`: {headline_line(r)}" for r in report.runs] + [""]
        lines += ["### dlprof: runs compared", ""]
        lines += _table(
            ["run", "num_workers", "step ms", "steps/s", "data wait %", "input-bound", "recommended num_workers"],
            [
                [
                    f"`{r.info.name}`",
                    setting(r.info.num_workers),
                    ms(r.steps.step.mean_ms),
                    per_s(r.steps.step.mean_ms),
                    f"{r.steps.data_wait_pct:.1f}",
                    r.advice.verdict,
                    setting(r.advice.num_workers),
                ]
                for r in report.runs
            ],
        )
        lines.append("")
    for run in report.runs:
        lines += _run(run) + [""]
    lines += [f"- {skipped_line(s)}" for s in report.skipped]
    return "\n".join(lines).rstrip() + "\n"
