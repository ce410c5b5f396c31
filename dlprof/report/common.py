"""Labels, table rows and lines shared by the renderers (numbers are written by report/format.py)."""

from __future__ import annotations

from dlprof.report.format import NOT_APPLICABLE, UNKNOWN, fixed, ms, pct
from dlprof.results.advice import HEADLINE_CHANGE, HEADLINE_KEEP, HEADLINE_NONE, RESTS_ON_MEASURED
from dlprof.results.analysis import CATEGORIES, DATA_REASON_SHARE
from dlprof.results.report import RunReport
from dlprof.results.trials import TrialSetting, TrialsResult

CATEGORY_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device copies",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other",
}
KEEP = "keep"


def skipped_line(skipped) -> str:
    """One line for a run (or file) the report left out."""
    return f"skipped {skipped.path}: {skipped.reason}"


def setting(value: object) -> str:
    """A recommended setting: the value, or 'keep' when no change is advised."""
    return KEEP if value is None else str(value)


def known(value: object) -> str:
    return UNKNOWN if value is None else str(value)


def run_line(info) -> str:
    gpu = f", GPU {info.gpu_name}" if info.gpu_name else ""
    cores = f", {info.usable_cores} usable cores" if info.usable_cores else ""
    return (
        f"{info.device}{gpu}, num_workers={known(info.num_workers)}, batch_size={known(info.batch_size)}, "
        f"pin_memory={known(info.pin_memory)}, prefetch_factor={known(info.prefetch_factor)}, "
        f"persistent_workers={known(info.persistent_workers)}{cores}"
    )


def verdict_line(run: RunReport) -> str:
    steps = run.steps
    return (
        f"{run.advice.verdict} input-bound: waiting for data {steps.categories['data_wait'].mean_ms:.2f} ms "
        f"of a {steps.step.mean_ms:.2f} ms step ({steps.data_wait_pct:.1f} %)"
    )


def headline_line(run: RunReport) -> str:
    """A run's report leads with this: its headline (what to change, what it buys, what that rests on); the input-bound
    verdict for an Advice made without one."""
    headline = run.advice.headline
    return verdict_line(run) if headline is None else headline.text


def evidence_line(run: RunReport) -> str | None:
    """The line under the headline: how input-bound the run is, as evidence; None when the verdict is the headline."""
    return None if run.advice.headline is None else verdict_line(run)


#: A headline's colour in HTML (page.CSS): a change that pays, settings to keep, no recommendation.
HEADLINE_CLASS = {HEADLINE_CHANGE: "bad", HEADLINE_KEEP: "good", HEADLINE_NONE: "warn"}


def headline_class(headline) -> str:
    return "warn" if headline is None else HEADLINE_CLASS.get(headline.kind, "warn")


def run_headline(run: RunReport) -> str:
    """One run's headline in a comparison of runs: ``<run>: <headline>``."""
    return f"{run.info.name}: {headline_line(run)}"


def recommendation_line(advice) -> str:
    return (
        f"num_workers={setting(advice.num_workers)}  pin_memory={setting(advice.pin_memory)}  "
        f"prefetch_factor={setting(advice.prefetch_factor)}  persistent_workers={setting(advice.persistent_workers)}"
        + (f"  (bound by {advice.bound})" if advice.bound else "")
    )


def breakdown_rows(steps, total_label: str = "step") -> list[list[str]]:
    """Mean, p50, p90 and share of each category, then the step itself."""
    rows = [
        [
            CATEGORY_LABELS[c],
            ms(steps.categories[c].mean_ms),
            ms(steps.categories[c].p50_ms),
            ms(steps.categories[c].p90_ms),
            pct(steps.categories[c].mean_ms, steps.step.mean_ms),
        ]
        for c in CATEGORIES
    ]
    return rows + [[total_label, ms(steps.step.mean_ms), ms(steps.step.p50_ms), ms(steps.step.p90_ms), "100.0"]]


def loader_rows(loader) -> list[list[str]]:
    """Wall and CPU ms per batch of each loader stage, then the whole batch."""
    return [
        ["dataset fetch", ms(loader.fetch.mean_ms), ms(loader.fetch_cpu_ms_mean)],
        ["tokenizer", ms(loader.tokenize.mean_ms), ms(loader.tokenize_cpu_ms_mean)],
        ["collate_fn", ms(loader.collate.mean_ms), ms(loader.collate_cpu_ms_mean)],
        ["batch", ms(loader.batch.mean_ms), ms(loader.batch_cpu_ms_mean)],
    ]


PREDICTED_HEADER = ["num_workers", "step ms", "steps/s", "steps/s over epochs", "bound"]


def predicted_rows(advice, mark: str = "") -> list[list[str]]:
    """One row per predicted num_workers; ``mark`` is appended to the recommended count."""
    return [
        [
            str(p.num_workers) + (mark if p.num_workers == advice.num_workers else ""),
            ms(p.step_ms),
            f"{p.steps_per_s:.2f}",
            "-" if p.epoch_steps_per_s is None else f"{p.epoch_steps_per_s:.2f}",
            p.bound,
        ]
        for p in advice.predicted
    ]


TRIALS_HEADER = [
    "num_workers",
    "persistent",
    "steps/s",
    "spread %",
    "steps/s over epochs",
    "restart ms",
    "workers MiB",
    "steps timed",
    "predicted",
    "error %",
]


def trials_heading(trials) -> str:
    """What the trials table shows: how many rounds ran, the basis the settings were compared on, and what the workers'
    memory column is."""
    limit = trials.max_worker_memory_mib
    return (
        f"Measured in this training: in-process trials, {trials.rounds} of {trials.rounds_planned} round(s); settings"
        f" compared {trials.basis} (the predictions too"
        + (", at the trials' pace: see the notes" if trials.pace is not None else "")
        + "); workers MiB: the workers' memory together (PSS)"
        + (f", at most {limit:,.0f} MiB allowed (--max-worker-memory)" if limit is not None else "")
    )


def is_recommended_trial(run: RunReport, trial: TrialSetting) -> bool:
    """Whether ``trial`` is the recommended setting: its num_workers, and its persistent_workers (as advised, else as
    the run had it)."""
    advice = run.advice
    persistent = advice.persistent_workers if advice.persistent_workers is not None else run.info.persistent_workers
    return trial.num_workers == advice.num_workers and trial.persistent_workers == bool(persistent)


def trials_rows(run: RunReport, mark: str = "") -> list[list[str]]:
    """One row per tried setting; ``mark`` is appended to the recommended one."""
    if run.trials is None:
        return []
    return [
        [
            str(r.num_workers) + (mark if is_recommended_trial(run, r) else ""),
            "yes" if r.persistent_workers else "no",
            fixed(r.steps_per_s),
            fixed(r.speed.spread_pct if r.speed else None, ".1f"),
            fixed(r.epoch_steps_per_s),
            fixed(r.restart_ms, ".0f"),
            fixed(r.workers_pss_mib, ".0f") + (" (over the limit)" if r.over_memory_limit else ""),
            str(r.speed.steps if r.speed else 0),
            *trial_prediction_cells(run.trials, r),
        ]
        for r in run.trials.settings
    ]


#: The error cell of the setting that sets the trials' pace (its paced prediction is its measurement).
PACE_CELL = "pace"


def trial_prediction_cells(trials: TrialsResult, setting: TrialSetting) -> list[str]:
    """The predicted and error cells of a tried setting: at the trials' pace where they have one, else as predicted."""
    if trials.pace is None:
        return [
            fixed(setting.predicted_steps_per_s, ".2f", NOT_APPLICABLE),
            fixed(setting.error_pct, "+.1f", NOT_APPLICABLE),
        ]
    sets_pace = (setting.num_workers, setting.persistent_workers) == (
        trials.pace.num_workers,
        trials.pace.persistent_workers,
    )
    return [
        fixed(setting.paced_steps_per_s, ".2f", NOT_APPLICABLE),
        PACE_CELL if sets_pace else fixed(setting.paced_error_pct, "+.1f", NOT_APPLICABLE),
    ]


def rests_on_line(run: RunReport) -> str | None:
    """What the recommended num_workers rests on, for a run with trials; None without trials or a recommendation."""
    advice = run.advice
    if run.trials is None or advice.num_workers is None:
        return None
    basis = f" (compared {advice.compared_on})" if advice.compared_on else ""
    if advice.rests_on == RESTS_ON_MEASURED:
        return f"rests on measurement: num_workers={advice.num_workers} was tried in this training{basis}"
    return f"rests on the model: num_workers={advice.num_workers} was not tried in this training{basis}"


RANKS_HEADER = [
    "rank",
    "step ms",
    "data wait ms",
    "wait %",
    "collectives ms",
    "own work ms",
    "loader ms/batch",
    "worker PSS MiB",
    "num_workers",
]


def rank_rows(ranks, mark: str = "") -> list[list[str]]:
    """One row per rank; ``mark`` is appended to the slowest rank."""
    return [
        [
            str(r.rank) + (mark if r.rank == ranks.slowest_rank else ""),
            ms(r.step_ms),
            ms(r.data_wait_ms),
            f"{r.data_wait_pct:.1f}",
            ms(r.collective_ms),
            ms(r.own_ms),
            ms(r.loader_batch_ms),
            "-" if r.worker_pss_mib is None else f"{r.worker_pss_mib:.1f}",
            known(r.num_workers),
        ]
        for r in ranks.ranks
    ]


def rank_set(ranks) -> str:
    """Rank numbers (ascending) as runs: ``0-2, 4, 6-19``."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def missing_ranks_line(run: RunReport) -> str | None:
    """The ranks of the job that left no trace, and that the report is made from the others; None when none is
    missing."""
    if not run.missing_ranks:
        return None
    several = len(run.missing_ranks) > 1
    return (
        f"missing {'ranks' if several else 'rank'} {rank_set(sorted(run.missing_ranks))}: no trace of"
        f" {'them' if several else 'it'} here (a node's run directory not given, or the rank ended before its"
        " window); this report is made from the other ranks"
    )


def ranks_line(ranks, compact: bool = False) -> str:
    """The cross-rank effect in one line: who is slowest, why, and who waited for it where (``compact``: the ranks that
    waited as runs, ``0-2, 4-63``, for a job of many ranks)."""
    slowest = next(r for r in ranks.ranks if r.rank == ranks.slowest_rank)
    if ranks.slowest_reason == "data":
        why = (
            f"rank {slowest.rank} waited {slowest.data_wait_ms:.2f} ms per step for data"
            f" ({ranks.extra_data_wait_ms:.2f} ms more than the other ranks)"
        )
    else:
        why = (
            f"rank {slowest.rank} is the slowest: its own work takes {slowest.own_ms:.2f} ms per step (compute, not"
            f" data: it waited {slowest.data_wait_ms:.2f} ms per step for data)"
        )
    where = f"in {ranks.collectives[0]}" if ranks.collectives else "(no collectives seen)"
    waited = sorted(ranks.waited_ms.items())
    if not waited:
        return why
    if len(waited) == 1:
        ((rank, value),) = waited
        return f"{why}; rank {rank} waited {value:.2f} ms per step for rank {slowest.rank} {where}"
    values = [v for _, v in waited]
    who = rank_set(r for r, _ in waited) if compact else ", ".join(str(r) for r, _ in waited)
    return (
        f"{why}; ranks {who} waited {min(values):.2f}-{max(values):.2f} ms per step "
        f"(mean {sum(values) / len(values):.2f}) for rank {slowest.rank} {where}"
    )


#: Up to this many ranks a report shows every rank in a table; beyond, it shows the ranks summed up
#: (``RankComparison.summary``): a table of 64 rows is not read, and the JSON report keeps every rank.
RANKS_TABLE_MAX = 16
#: The text and Markdown reports list at most this many machines (the slowest first; the HTML and JSON reports all).
NODES_SHOWN = 16


def summarized(ranks) -> bool:
    """Whether a report shows ``ranks`` summed up rather than rank by rank."""
    return ranks.summary is not None and len(ranks.ranks) > RANKS_TABLE_MAX


def rank_count(run: RunReport) -> str:
    """How many ranks the report compares: ``20``, or with ranks missing ``20 of 24, missing 20-23``."""
    count = len(run.ranks.ranks) if run.ranks is not None else 1
    if not run.missing_ranks:
        return str(count)
    return f"{count} of {count + len(run.missing_ranks)}, missing {rank_set(sorted(run.missing_ranks))}"


def ranks_heading(run: RunReport) -> str:
    """What the summary of many ranks covers (called only for a report that has one)."""
    assert run.ranks is not None and run.ranks.summary is not None
    nodes = run.ranks.summary.nodes
    if all(n.host is None for n in nodes):
        where = ", hosts unknown"
    else:
        where = f" on {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    count = rank_count(run)
    if run.missing_ranks:  # "20 of 24 ranks on 5 nodes, missing 20-23"
        shown, _, missing = count.partition(", ")
        return f"{shown} ranks{where}, {missing}; ms per step, profiled"
    return f"{count} ranks{where}; ms per step, profiled"


SPREAD_HEADER = ["over the ranks", "p50", "p90", "max", "rank with the max"]


def spread_rows(summary) -> list[list[str]]:
    """p50, p90 and max over the ranks of step time, data wait and time in collectives."""
    return [
        [label, ms(s.p50_ms), ms(s.p90_ms), ms(s.max_ms), str(s.max_rank)]
        for label, s in (
            ("step", summary.step),
            ("data wait", summary.data_wait),
            ("in collectives", summary.collectives),
        )
    ]


SLOWEST_HEADER = [
    "rank",
    "host",
    "step ms",
    "own work ms",
    "data wait ms",
    "wait %",
    "collectives ms",
    "reason",
    "ranks that waited for it (ms per step)",
]


def waited_cell(slow) -> str:
    """The ranks that waited for a slow rank, and how long."""
    if not slow.waited_by:
        return "none"
    return f"{rank_set(slow.waited_by)} ({slow.waited_ms_mean:.2f} mean, {slow.waited_ms_max:.2f} max)"


def slowest_rows(summary, mark: str = "") -> list[list[str]]:
    """One row per slow rank, the slowest first; ``mark`` is appended to the first, which sets the job's pace."""
    return [
        [
            str(s.stats.rank) + (mark if i == 0 else ""),
            known(s.stats.host),
            ms(s.stats.step_ms),
            ms(s.stats.own_ms),
            ms(s.stats.data_wait_ms),
            f"{s.stats.data_wait_pct:.1f}",
            ms(s.stats.collective_ms),
            s.reason,
            waited_cell(s),
        ]
        for i, s in enumerate(summary.slowest)
    ]


def slowest_heading(summary) -> str:
    return f"The {len(summary.slowest)} slowest ranks (most own work per step; the first sets the job's pace)"


def reason_rule() -> str:
    """How a slow rank's reason is decided."""
    share = "half" if DATA_REASON_SHARE == 0.5 else f"{100 * DATA_REASON_SHARE:g} %"
    return (
        f"reason: data when the rank's data wait beyond the other ranks' median is at least {share} of its own work"
        " beyond theirs, else compute"
    )


NODES_HEADER = ["node", "ranks", "median step ms", "slowest rank", "its own work ms"]


def node_rows(nodes) -> list[list[str]]:
    """One row per machine."""
    return [
        [known(n.host), rank_set(n.ranks), ms(n.step_ms_p50), str(n.slowest_rank), ms(n.slowest_own_ms)] for n in nodes
    ]


def nodes_heading(summary, shown: int) -> str:
    nodes = len(summary.nodes)
    more = f", the {shown} slowest shown" if shown < nodes else ""
    return f"Nodes ({nodes}, the slowest first{more})"
