"""The lines about tuning every renderer shows under the trials' table: what the trials cost against what the chosen
setting saves, and the training after the trials (``--then best|keep``); and the note on a run still training."""

from __future__ import annotations

from dlprof.results.report import RunInfo
from dlprof.results.trials import TrialsResult, setting_label


def tuning_cost_line(trials: TrialsResult) -> str | None:
    """What the trials cost against what the chosen setting saves, in one line; None without it. Where the training
    went on at another setting after them and its speed there was measured, what that setting saved over the steps it
    ran; else what the chosen setting saves per 1,000 steps."""
    cost = trials.cost
    if cost is None:
        return None
    took = f"the trials took {cost.seconds:.1f} s ({cost.steps} steps"
    if cost.own_seconds is None:
        return f"cost of tuning: {took}); your own setting's speed is unknown, so what it saves is too"
    extra = cost.seconds - cost.own_seconds
    took += f"; {cost.own_seconds:.1f} s at your own setting, {abs(extra):.1f} s {'more' if extra > 0 else 'less'})"
    tuned = trials.tuned
    if cost.tuned_saved_s is not None and cost.tuned_steps is not None and tuned and tuned.num_workers is not None:
        saved_s = cost.tuned_saved_s
        return (
            f"cost of tuning: {took}; after the switch, {setting_label(tuned.num_workers, tuned.persistent_workers)}"
            f" {'saved' if saved_s >= 0 else 'lost'} {abs(saved_s):.1f} s over the {cost.tuned_steps:,} steps it ran"
            " against your own setting (steady steps inside an epoch)"
        )
    saved = cost.saved_s_per_1000
    if saved is None or saved <= 0 or cost.own_steps_per_s is None:
        return f"cost of tuning: {took}; num_workers={cost.num_workers} is no faster than your own setting"
    saves = (
        f"num_workers={cost.num_workers} saves {saved:.1f} s per 1,000 steps over your own setting"
        f" ({cost.own_steps_per_s:.2f} -> {cost.chosen_steps_per_s:.2f} steps/s, {trials.basis})"
    )
    made_up = f": made up after ~{cost.payback_steps:,.0f} steps" if cost.payback_steps is not None else ""
    return f"cost of tuning: {took}; {saves}{made_up}"


def tuned_line(trials: TrialsResult) -> str | None:
    """The training after the trials (``--then best|keep``): the setting it went on at, from which step, its speed
    there against its trial's and whether that held, or why it is not known; None with ``--then stop``."""
    tuned = trials.tuned
    if tuned is None:
        return None
    head = f"after the trials (--then {tuned.mode}): "
    if tuned.first_step is None or tuned.num_workers is None:
        return head + (tuned.error or "no switch")
    line = (
        f"{head}trained on at {setting_label(tuned.num_workers, tuned.persistent_workers)} from step"
        f" {tuned.first_step:,} ({tuned.steps_at_setting:,} steps)"
    )
    if tuned.speed is not None:
        line += f": {tuned.speed.steps_per_s:.2f} steps/s (spread {tuned.speed.spread_pct:.1f} %)"
        if tuned.trial_steps_per_s is not None:
            trial = "its trial"
            if tuned.trial_persistent_workers is not None:
                tried = "with" if tuned.trial_persistent_workers else "without"
                trial = f"its count's trial {tried} persistent workers (inside an epoch they change nothing)"
            line += f" against {tuned.trial_steps_per_s:.2f} in {trial}"
        if tuned.change_pct is not None:
            line += f" ({tuned.change_pct:+.1f} %)"
    if tuned.held is not None:
        line += ": held" if tuned.held else ": did not hold"
    elif tuned.error:
        line += f": {tuned.error}"
    levels = tuned.fault_levels
    if levels is not None and levels.moved:
        line += (
            f"; the main process's page faults moved, {levels.faults_per_step:,.0f} a step after the switch against"
            f" {levels.trial_faults_per_step:,.0f} in its trial ({levels.sys_ms:.1f} vs {levels.trial_sys_ms:.1f} ms"
            " of kernel time): glibc malloc's level, which moves a CPU training's speed at any setting"
        )
    cpu = tuned.cpu_levels
    if cpu is not None and cpu.cpu_per_step_moved:
        more = "more" if cpu.cpu_ms > cpu.trial_cpu_ms else "less"
        line += (
            f"; the main process took {cpu.cpu_ms:.1f} ms of CPU a step after the switch against"
            f" {cpu.trial_cpu_ms:.1f} in its trial, with as many cores busy ({cpu.cores:.2f} vs {cpu.trial_cores:.2f}):"
            f" the same work took the training {more} CPU time, a move of its own speed, not the setting's"
        )
    return line


def status_note(info: RunInfo) -> str | None:
    """What a run's status says of its report, when it is not ``complete``; None when it is (or is unknown)."""
    if info.training:
        return (
            "the training goes on after the trials: this report covers the steps to their end; analyze the run again"
            " when the training ends for its speed at the setting it went on at"
        )
    return f"the recording is {info.status}" if info.incomplete else None
