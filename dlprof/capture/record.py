"""``dlprof record``: run a training command under the recorder and leave finished traces, one per rank.

The steps, each in its own module: claim the run directory and write the session's settings
(:mod:`~dlprof.capture.run_dir`), run the command as a child process that every Python process it
starts records itself in (:mod:`~dlprof.capture.child`), then merge what each rank recorded into
``traces/<run>/`` (:mod:`~dlprof.capture.finalize`).
"""

from __future__ import annotations

from dataclasses import replace

from dlprof.capture import child, finalize, interim, merge, plain, run_dir
from dlprof.capture.job import find_job
from dlprof.capture.memory import MemoryReading
from dlprof.core import schema
from dlprof.core.errors import UsageError
from dlprof.results.record import THEN_BEST, THEN_STOP, RecordRequest, RecordResult


def record(request: RecordRequest, choose: interim.Choose | None = None) -> RecordResult:
    """Run ``request.command`` under the profiler and write ``<out_dir>/<name>/<host>_<pid>.<ms>.pt.trace.json.gz`` per
    rank.

    A node of a job over several machines (:mod:`~dlprof.capture.job`) writes its ranks' traces into the run
    directory that the records of the job's other nodes share, and touches none of their files.

    With ``--then best|keep``, the trials' traces are written once the trials end, while the training goes on, and
    ``choose`` turns them into the setting it trains on (:mod:`~dlprof.capture.interim`); the final traces replace
    them.

    Raises:
        UsageError, InputError: the command or options cannot work; nothing was run.
        RecordError: the training ended before the profiler recorded a step; no trace was written.
    """
    request.schedule.check()
    argv = child.child_argv(request.command)
    job = find_job(request.command)
    if request.plain_launch and job is not None:
        raise UsageError(
            f"--plain-launch: {request.command[0]} runs a job of several processes, and a plain launch is timed for"
            " one training process only; drop --plain-launch"
        )
    if job is not None and job.multi_node and request.trials is not None and request.trials.then == THEN_BEST:
        raise UsageError(
            f"--then best: {request.command[0]} runs on several machines, and each machine's dlprof record would"
            " choose on its own; use --then keep, or --then stop and relaunch with the recommended setting"
        )
    if job is not None and job.multi_node and request.fresh_name_if_taken:
        nodes = f"on {job.nodes} machines" if job.nodes is not None and job.nodes > 1 else "on several machines"
        raise UsageError(
            f"{request.command[0]} runs {nodes}: give --name, the same on every node, so that every node's dlprof"
            " record writes into one run directory (a default name is made of the time, which nodes do not share)"
        )
    directory = run_dir.prepare_run_dir(request.out_dir, request.name, request.fresh_name_if_taken, job=job)
    scratch = run_dir.scratch_dir(directory, job)
    run_dir.write_session_config(scratch, request)

    def merge_inputs(exit_code: int | None, samples: list[MemoryReading]) -> merge.MergeInputs:
        return merge.MergeInputs(
            session_dir=scratch,
            command=request.cli_argv,
            script=tuple(request.command),
            exit_code=exit_code,
            memory_samples=samples,
            memory_interval_ms=request.memory_interval_ms,
            overrides=request.overrides,
            redact=request.redact,
            job=None if job is None else (job.digest if request.redact else job.key),
        )

    trials = request.trials
    watcher = None
    if trials is not None and trials.then != THEN_STOP and choose is not None:
        multi_node = job is not None and job.multi_node
        watcher = interim.TrialsWatcher(
            directory, scratch, lambda samples: merge_inputs(None, samples), multi_node, choose
        )
    exit_code, samples, stopped_by = child.run_child(
        argv,
        child.child_env(scratch),
        request.memory_interval_ms,
        scratch,
        tick=watcher.tick if watcher is not None else None,
    )
    inputs = merge_inputs(exit_code, samples)
    wording = finalize.Wording(
        command=" ".join(request.command),
        first_recorded_step=request.wait + request.warmup + 1,
        schedule_options=f"--wait {request.wait} --warmup {request.warmup}",
        schedule_names="--wait/--warmup",
    )
    replaces = watcher.written if watcher is not None else ()
    result = finalize.write_traces(directory, inputs, wording, stopped_by=stopped_by, replaces=replaces)
    if not request.plain_launch:
        return result
    if result.status != schema.STATUS_COMPLETE:
        return replace(result, plain_launch_note=f"dlprof: no plain launch: the recording is {result.status}")
    note, stopped_by = plain.plain_launch(argv, result)
    # Stopped by a signal: the recording stands, and dlprof record exits as a stopped command does (130, 143).
    exit_code = 128 + stopped_by if stopped_by is not None else result.exit_code
    return replace(result, plain_launch_note=note, exit_code=exit_code)
