"""``dlprof record``'s workflow: the :class:`~dlprof.results.record.RecordRequest` of the command line's values (the
user's command, else the built-in workload planned around the profiler's window, the reference steps and the trials),
and what a finished recording tells its user. ``dlprof sweep`` builds its request here too.

The command line (``cli.py``) checks which options go together; this module plans with the values it is handed.
"""

from __future__ import annotations

from pathlib import Path

from dlprof.core.errors import DlprofError, UsageError
from dlprof.results.record import (
    DEFAULT_TRIAL_ROUNDS,
    THEN_BEST,
    THEN_STOP,
    RecordRequest,
    RecordResult,
    TrialRequest,
)

#: Steps recorded when neither ``--active`` nor ``--steps`` says how many.
DEFAULT_ACTIVE = 20


def trial_request(
    counts: tuple[int, ...],
    rounds: int | None,
    persistent: bool,
    steps: int | None,
    run_to_end: bool,
    workload_steps: int | None = None,
    max_worker_memory_mib: float | None = None,
    then: str = THEN_STOP,
) -> TrialRequest:
    """The in-process trials of ``counts``, checked against the options they cannot go with.

    Args:
        rounds: ``--trial-rounds`` (None: :data:`~dlprof.results.record.DEFAULT_TRIAL_ROUNDS`).
        steps: ``--trial-steps`` (None: chosen from the measured step time).
        workload_steps: the built-in workload's ``--steps`` (None with the user's command).
        max_worker_memory_mib: ``--max-worker-memory`` (None: no limit).
        then: ``--then`` (what the training does after the trials).
    """
    from dlprof.capture.trial_plan import check_request

    request = TrialRequest(
        counts=counts,
        rounds=rounds or DEFAULT_TRIAL_ROUNDS,
        persistent=persistent,
        trial_steps=steps,
        max_worker_memory_mib=max_worker_memory_mib,
        then=then,
    )
    check_request(request, run_to_end, workload_steps)
    return request


def record_request(
    *,
    out_dir: Path,
    name: str | None,
    wait: int,
    warmup: int,
    active: int | None,
    reference_steps: int,
    run_to_end: bool,
    loader_spans: bool,
    command: tuple[str, ...],
    cli_argv: tuple[str, ...],
    name_prefix: str = "",
    redact: bool = False,
    trials: TrialRequest | None = None,
    plain_launch: bool = False,
    **workload,
) -> RecordRequest:
    """The request for the user's ``command``, else for the built-in workload configured by ``workload`` (the
    built-in workload's options, by their parameter names), planned to train until dlprof has what it needs."""
    from dlprof.capture.run_dir import default_run_name

    if not command:
        from dlprof.workloads.lora import plan

        if trials is not None and trials.then != THEN_STOP and workload.get("steps") is None:
            raise UsageError(
                f"--then {trials.then} trains the built-in workload on to its end after the trials: give its length,"
                " --steps N (e.g. --steps 3000)"
            )

        if trials is not None and trials.then != THEN_STOP and active is None:
            active = DEFAULT_ACTIVE  # --steps is the training's length here, not the window's
        options, active = plan(workload, wait, warmup, active, reference_steps)
        if trials is not None:  # room for the trials too: dlprof stops the workload once they are done
            from dataclasses import replace

            from dlprof.capture.trial_plan import steps_bound

            if trials.then == THEN_STOP:
                options = replace(options, steps=options.steps + steps_bound(trials, options.prefetch_factor))
        command = ("python", "-m", "dlprof.workloads.lora", *options.to_argv())
        # Without --steps the built-in workload trains until dlprof has what it needs; with --then, dlprof follows
        # the trials' plan through its --steps.
        run_to_end = workload.get("steps") is not None and trials is None
    made_up = name is None
    name = name or default_run_name(command, out_dir, name_prefix)
    return RecordRequest(
        command=command,
        out_dir=out_dir,
        name=name,
        wait=wait,
        warmup=warmup,
        active=DEFAULT_ACTIVE if active is None else active,
        cli_argv=cli_argv,
        loader_spans=loader_spans,
        reference_steps=reference_steps,
        run_to_end=run_to_end,
        fresh_name_if_taken=made_up,
        redact=redact,
        trials=trials,
        plain_launch=plain_launch,
    )


def timed_reference_steps(result: RecordResult) -> str:
    """The unprofiled reference steps timed, as ``dlprof analyze`` counts them: ``"7"``, or ``"7-9"`` when ranks
    differ."""
    from dlprof.analysis.unprofiled import reference_step_indices

    counts = sorted({len(reference_step_indices(m)) for m in result.manifests}) or [0]
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def trials_ran(result: RecordResult) -> str:
    """``", then tried num_workers 0,2 in the training (4 segments in 2 rounds)"``, or "" without trials."""
    trials = next((m.trials for m in result.manifests if m.trials is not None), None)
    if trials is None:
        return ""
    tried = [segment for segment in trials.segments if not segment.trim_padding]
    rounds = len({segment.round for segment in tried})
    persistent = " (and persistent workers)" if trials.persistent else ""
    trimmed = ", and one with batches trimmed to their longest sequence" if len(tried) < len(trials.segments) else ""
    return (
        f", then tried num_workers {','.join(map(str, trials.counts))}{persistent} in the training"
        f" ({len(tried)} segment{'s' if len(tried) != 1 else ''} in {rounds} round{'s' if rounds != 1 else ''}"
        f"{trimmed})"
    )


def recorded_lines(result: RecordResult, out_dir: Path, user_command: bool) -> list[tuple[str, bool]]:
    """What ``record`` recorded, where the traces are and how to view them: each line with whether it goes to
    stderr, in the order they are printed."""
    ranks = len(result.trace_paths)
    per_rank = " per rank" if ranks > 1 else ""
    lines = [
        (
            f"dlprof: recorded {result.steps_recorded} steps{per_rank} ({result.status}), {result.workers_seen}"
            " DataLoader worker(s) seen" + (f", {ranks} ranks" if ranks > 1 else ""),
            False,
        )
    ]
    lines += [(f"  trace: {trace_path}", False) for trace_path in result.trace_paths]
    lines.append((f"  view:  tensorboard --logdir {out_dir}   or open the file in https://ui.perfetto.dev", False))
    trials = trials_ran(result)
    if result.stopped_early and user_command:
        lines.append(
            (
                f"dlprof: stopped training after the window and {timed_reference_steps(result)} unprofiled reference"
                f" steps{trials}; add --run-to-end{' (without --try-workers)' if trials else ''} to let it train to"
                " its end",
                False,
            )
        )
    elif trials:
        lines.append((f"dlprof: timed {timed_reference_steps(result)} unprofiled reference steps{trials}", False))
    incomplete = next((m.trials.incomplete for m in result.manifests if m.trials and m.trials.incomplete), None)
    if incomplete:
        lines.append((f"dlprof: the trials are incomplete: {incomplete}", True))
    return lines


def trials_choice(mode: str):
    """``--then``'s choice (:data:`dlprof.capture.interim.Choose`): the trials' traces, written while the training goes
    on, analysed in one process (the training has the cores); the headline and the setting chosen said on stderr.
    ``best``: the recommended setting (what the recommendation leaves unsaid stays the script's own); ``keep``: the
    script's own, which the deciding rank takes without this."""
    import sys

    def choose(written: RecordResult) -> dict:
        from dlprof.capture.probe.switch import Setting
        from dlprof.capture.tuned import choice_document
        from dlprof.report.common import headline_line
        from dlprof.workflows.analyze import build_report

        try:
            report = build_report(written.run_dir, processes=1)
        except DlprofError as error:
            print(f"dlprof: the trials could not be analysed ({error}); the training goes on", file=sys.stderr)
            return choice_document(None, f"the trials could not be analysed ({error})")
        run = report.runs[0]
        print(f"dlprof: the trials are done: {headline_line(run)}", file=sys.stderr)
        advice, own = run.advice, run.manifest.loader if run.manifest is not None else None
        if mode != THEN_BEST:
            print("dlprof: --then keep: training on at the script's own settings", file=sys.stderr, flush=True)
            return choice_document(None, "--then keep trains on at the script's own settings")
        if advice.num_workers is None:
            print("dlprof: no setting is recommended; training on at the last one tried", file=sys.stderr, flush=True)
            return choice_document(None, "the trials' analysis recommends no setting")
        persistent = advice.persistent_workers
        if persistent is None:
            persistent = bool(own and own.persistent_workers)
        prefetch = advice.prefetch_factor or (own.prefetch_factor if own is not None else None)
        chosen = choice_document(Setting(advice.num_workers, prefetch if advice.num_workers else None, persistent))
        said = f"num_workers={advice.num_workers}" + (", persistent_workers=True" if persistent else "")
        print(f"dlprof: --then best: training on at {said} ({written.run_dir})", file=sys.stderr, flush=True)
        return chosen

    return choose


def trial_scalars_line(run_dir: Path) -> tuple[str, bool] | None:
    """The trials' TensorBoard scalars written into ``<run>/scalars/`` (as ``dlprof sweep`` writes its own): the
    line that says where, or why not (to stderr); None when the run holds no trials."""
    from dlprof.workflows.trials import write_run_trial_scalars

    try:
        written = write_run_trial_scalars(run_dir)
    except ImportError:  # torch.utils.tensorboard needs the tensorboard package; the trials themselves do not
        return "dlprof: the trials' TensorBoard scalars were not written (pip install tensorboard)", True
    except DlprofError as error:  # the recording is kept; analysing it is the user's next step anyway
        return f"dlprof: the trials' TensorBoard scalars were not written ({error})", True
    if written is None:
        return None
    return f"  trials: TensorBoard scalars in {written}; the report: dlprof analyze {run_dir}", False
