"""``dlprof record``: run a training command under the recorder and leave finished traces, one per rank.

The steps, each in its own module: claim the run directory and write the session's settings
(:mod:`~dlprof.capture.run_dir`), run the command as a child process that every Python process it
starts records itself in (:mod:`~dlprof.capture.child`), then merge what each rank recorded into
``traces/<run>/`` (:mod:`~dlprof.capture.finalize`).
"""

from __future__ import annotations

from dlprof import schema
from dlprof.capture import child, finalize, merge, run_dir
from dlprof.results.record import RecordRequest, RecordResult


def record(request: RecordRequest) -> RecordResult:
    """Run ``request.command`` under the profiler and write ``<out_dir>/<name>/<host>_<pid>.<ms>.pt.trace.json.gz`` per
    rank.

    Raises:
        UsageError, InputError: the command or options cannot work; nothing was run.
        RecordError: the training ended before the profiler recorded a step; no trace was written.
    """
    request.schedule.check()
    argv = child.child_argv(request.command)
    directory = run_dir.prepare_run_dir(request.out_dir, request.name, request.fresh_name_if_taken)
    scratch = directory / schema.SCRATCH_DIR
    run_dir.write_session_config(scratch, request)
    exit_code, samples, stopped_by = child.run_child(
        argv, child.child_env(scratch), request.memory_interval_ms, scratch
    )
    inputs = merge.MergeInputs(
        scratch,
        request.cli_argv,
        tuple(request.command),
        exit_code,
        samples,
        request.memory_interval_ms,
        request.overrides,
        redact=request.redact,
    )
    wording = finalize.Wording(
        command=" ".join(request.command),
        first_recorded_step=request.wait + request.warmup + 1,
        schedule_options=f"--wait {request.wait} --warmup {request.warmup}",
        schedule_names="--wait/--warmup",
    )
    return finalize.write_traces(directory, inputs, wording, stopped_by=stopped_by)
