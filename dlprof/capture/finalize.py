"""Turn what the recorded processes left in the session directory into the run's traces, one per rank.

Runs in ``dlprof record``'s own process once the training has ended (and in the training process for
``DlprofCallback``). Each rank's recording is read through one parser, :func:`read_rank_result`: past
it, code reads typed fields. A run directory either holds finished traces, one per rank that trained
(manifest status ``complete``, or ``partial`` with the error when training failed midway), or no trace
at all: when nothing was recorded, the run directory is removed and :class:`~dlprof.core.errors.RecordError`
says why and what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from dlprof.capture import merge
from dlprof.capture.run_dir import remove_unrecorded
from dlprof.capture.session import ENDED_FILE, ERROR_FILE
from dlprof.core import redact, schema
from dlprof.core.errors import RecordError
from dlprof.core.lenient import parse_dataclass
from dlprof.core.manifest import Manifest, StepClock
from dlprof.results.record import RankResult, RecordResult

#: Each recorded process's recording in the session directory (``result-rank<R>-<pid>.json``).
RESULT_GLOB = "result-rank*.json"


@dataclass(frozen=True)
class Wording:
    """How the messages of a record that failed name the training and its schedule."""

    #: The training, as the user started it: ``python train.py --lr 1``, ``trainer.train()``.
    command: str
    #: The first step the profiler records.
    first_recorded_step: int
    #: How the user set the schedule: ``--wait 5 --warmup 3``.
    schedule_options: str
    #: The settings to lower when too few steps ran: ``--wait/--warmup``.
    schedule_names: str

    def failed_early(self, error: str | None) -> str:
        return (
            f"{self.command}: failed before the profiler recorded a step ({error}); fix the error shown above and"
            " record again"
        )

    def too_few_steps(self, steps_run: int) -> str:
        return (
            f"{self.command}: ran {steps_run} training steps but the profiler records from step"
            f" {self.first_recorded_step} on ({self.schedule_options}); run more steps or lower {self.schedule_names}"
        )


def read_rank_result(path: Path) -> RankResult:
    """One recorded process's recording, parsed and checked once: past this, code reads typed fields.

    A value out of range is read as unknown and named on stderr; the rest of the recording is kept.

    Raises:
        RecordError: the file cannot be read, or is no recording this dlprof wrote.
    """
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise RecordError(f"{path}: cannot read this process's recording ({error}); record again") from None
    result, problems = parse_dataclass(RankResult, document, "result")
    if result is None:
        raise RecordError(
            f"{path}: not a recording this dlprof wrote ({problems[0]}); record again with one dlprof version"
        )
    if not result.step_clock.columns_agree():
        problems = (*problems, "result.step_clock columns differ in length: read as unknown")
        result = replace(result, step_clock=StepClock())
    for problem in problems:
        print(f"dlprof: {path.name}: {problem}", file=sys.stderr)
    return result


def read_results(scratch: Path) -> list[RankResult]:
    """The recorded processes' recordings, one per rank (by rank).

    Every process that trained recorded itself. Where several share a rank (a helper that iterated a
    DataLoader before the training, say), the one that trained is kept: it stepped an optimizer, left
    a trace, and ran the most steps.
    """
    by_rank: dict[int, list[RankResult]] = {}
    for path in scratch.glob(RESULT_GLOB):
        result = read_rank_result(path)
        by_rank.setdefault(result.rank, []).append(result)
    chosen = []
    for rank, candidates in sorted(by_rank.items()):
        candidates.sort(
            key=lambda r: (r.schedule.step_mode == "optimizer", r.trace_file is not None, r.steps_run), reverse=True
        )
        chosen.append(candidates[0])
        for other in candidates[1:]:
            print(
                f"dlprof: pid {other.pid} also iterated a DataLoader as rank {rank} ({other.steps_run} steps, "
                f"no training like pid {candidates[0].pid}'s): its recording is left out",
                file=sys.stderr,
            )
    return chosen


def _fail(run_dir: Path, message: str, exit_code: int, scratch: Path) -> RecordError:
    """Remove what this record left (``scratch``, its session directory; and the run directory when nothing else is in
    it: nothing may look like a run, and another node's files stay) and describe the failure."""
    remove_unrecorded(run_dir, scratch)
    return RecordError(message, exit_code)


def _how_it_ended(exit_code: int, stopped_by: int | None) -> str:
    """How the command ended, for messages: "was killed by SIGKILL (out of memory?)", "ended (exit code 1)"."""
    if stopped_by is not None:
        return f"was stopped ({signal.Signals(stopped_by).name} to dlprof record)"
    if exit_code == 128 + signal.SIGKILL:
        return "was killed by SIGKILL (out of memory?)"
    if 128 < exit_code < 128 + signal.NSIG:
        return f"was killed by {signal.Signals(exit_code - 128).name}"
    return f"ended (exit code {exit_code})"


def _disk_full(path: Path) -> bool:
    """Whether the file system of ``path`` has (almost) no space left: why nothing could be written."""
    try:
        return shutil.disk_usage(path).free < 1 << 20
    except OSError:
        return False


def _nothing_recorded(scratch: Path, wording: Wording, how: str, failed: int) -> tuple[str, int]:
    """Why no process left a recording, and the exit code to report."""
    if _disk_full(scratch):
        return (
            f"{scratch}: no space left on device, nothing could be recorded; free disk space or choose another --out",
            2,
        )
    ended = scratch / ENDED_FILE
    if ended.exists():
        return wording.failed_early(ended.read_text().strip()), failed
    return (
        f"{wording.command}: {how} before any of its processes trained (no optimizer step, no DataLoader iterated);"
        " see its output above"
    ), failed


def _traced_results(
    run_dir: Path, inputs: merge.MergeInputs, wording: Wording, stopped_by: int | None
) -> list[RankResult]:
    """The recordings of the ranks that left a trace; raises RecordError (the run directory removed) when none
    did."""
    scratch = inputs.session_dir
    failed = 128 + stopped_by if stopped_by is not None else 2
    if (scratch / ERROR_FILE).exists():
        raise _fail(run_dir, (scratch / ERROR_FILE).read_text().strip(), failed, scratch)
    try:
        results = read_results(scratch)
    except RecordError as error:
        raise _fail(run_dir, str(error), 2, scratch) from None
    how = _how_it_ended(inputs.exit_code or 0, stopped_by)
    # A provisional recording was written when the window was exported; its process never finished.
    unfinished = f"the training process {how} before dlprof finished its recording"
    results = [replace(r, error=unfinished) if r.provisional else r for r in results]
    export_errors = [r.export_error for r in results if r.export_error]
    if export_errors and not any(r.trace_file for r in results):
        raise _fail(
            run_dir,
            f"{wording.command}: could not save the recorded steps ({export_errors[0]}); free disk space or choose"
            " another --out",
            2,
            scratch,
        )
    if not results:
        raise _fail(run_dir, *_nothing_recorded(scratch, wording, how, failed), scratch)
    traced = [r for r in results if r.trace_file is not None]
    if not traced:
        first = results[0]
        if first.status != schema.STATUS_COMPLETE:
            raise _fail(run_dir, wording.failed_early(first.error), failed, scratch)
        raise _fail(run_dir, wording.too_few_steps(first.steps_run), failed, scratch)
    for result in results:
        if result.trace_file is None:
            print(
                f"dlprof: rank {result.rank} (pid {result.pid}) ran {result.steps_run} steps, too few to record; its"
                " trace is left out",
                file=sys.stderr,
            )
    return traced


def _share_calibration(results: list[RankResult]) -> list[RankResult]:
    """Ranks calibrate once per machine (local rank 0): give the others on that machine its numbers."""
    by_host = {
        r.host.hostname: r.host for r in results if r.host.handoff is not None or r.host.worker_startup is not None
    }
    shared = []
    for result in results:
        source, host = by_host.get(result.host.hostname), result.host
        if source is not None:
            host = replace(
                host,
                handoff=host.handoff if host.handoff is not None else source.handoff,
                worker_startup=host.worker_startup if host.worker_startup is not None else source.worker_startup,
            )
        shared.append(replace(result, host=host))
    return shared


def _redactor(results: list[RankResult], inputs: merge.MergeInputs) -> redact.Redactor:
    """One Redactor for every rank of the run (a host is the same placeholder in each rank's trace)."""
    manifests: list[dict] = [
        {"host": {"hostname": r.host.hostname}, "process_argv": list(r.process_argv)} for r in results
    ]
    manifests.append({"command": list(inputs.command), "script": list(inputs.script)})
    return redact.for_run(manifests, cwd=os.getcwd())


def _free_trace_path(run_dir: Path, host: str, pid: int) -> Path:
    """``<host>_<pid>.<ms>.pt.trace.json.gz``, the milliseconds moved on while that name is taken: the nodes of a job
    write into one run directory, and two may share a host label (``--redact``) and a pid (containers)."""
    ms = time.time_ns() // 1_000_000
    while (path := run_dir / f"{host}_{pid}.{ms}{schema.TRACE_SUFFIX}").exists():
        ms += 1
    return path


def _merged(
    result: RankResult, inputs: merge.MergeInputs, redactor: redact.Redactor | None
) -> tuple[dict, Manifest, str]:
    """One rank's trace document (redacted when asked), its manifest and its host's label.

    Raises:
        OSError, orjson.JSONDecodeError: its Kineto trace cannot be read (written in part).
    """
    assert result.trace_file is not None  # only ranks that exported a trace are written (_traced_results)
    kineto = orjson.loads((inputs.session_dir / result.trace_file).read_bytes())
    kineto, manifest = merge.merge_rank(kineto, result, inputs)
    host = result.host.hostname or socket.gethostname()
    if redactor is not None:  # the one redaction step of every trace dlprof writes
        redactor.redact_value(kineto)  # in place: process and thread names, event names and args
        manifest = replace(redactor.redact_fields(manifest), job=inputs.job)  # the job's digest, as every node has it
        host = redactor.host_label(host)
    return merge.trace_document(kineto, manifest), manifest, host


def write_interim(run_dir: Path, inputs: merge.MergeInputs, results: list[RankResult]) -> RecordResult:
    """The trials' traces while the training goes on (``--then best|keep``): every rank's recording so far, status
    ``training``, the session directory left as it is (:func:`write_traces` replaces them at the training's end).

    Raises:
        OSError, orjson.JSONDecodeError: a rank's trace could not be read or written; none is left.
    """
    so_far = [
        replace(r, status=schema.STATUS_TRAINING, provisional=False, error=None)
        for r in results
        if r.trace_file is not None
    ]
    if not so_far:
        raise OSError("no rank's recorded steps were saved")
    so_far = _share_calibration(so_far)
    redactor = _redactor(so_far, inputs) if inputs.redact else None
    traces: list[tuple[Path, Manifest]] = []
    try:
        for result in so_far:
            document, manifest, host = _merged(result, inputs, redactor)
            path = _free_trace_path(run_dir, host, result.pid)
            merge.write_gzip_json_atomically(document, path, inputs.session_dir)
            traces.append((path, manifest))
    except (OSError, orjson.JSONDecodeError):
        for path, _ in traces:
            path.unlink(missing_ok=True)
        raise
    return _record_result(run_dir, traces, 0)


def _write_rank(
    run_dir: Path,
    result: RankResult,
    inputs: merge.MergeInputs,
    wording: Wording,
    redactor: redact.Redactor | None,
    written: list[Path],
) -> tuple[Path, Manifest]:
    """Merge one rank's recording into its trace file (redacted when asked), and return the file and its manifest."""
    scratch = inputs.session_dir
    try:
        document, manifest, host = _merged(result, inputs, redactor)
    except (OSError, orjson.JSONDecodeError) as error:  # written in part: the disk filled up during the export
        raise _fail(
            run_dir,
            f"{wording.command}: rank {result.rank}'s recorded steps are incomplete ({error}; no space left on the"
            " device?); free disk space or choose another --out",
            2,
            scratch,
        ) from None
    trace_path = _free_trace_path(run_dir, host, result.pid)
    try:
        merge.write_gzip_json_atomically(document, trace_path, scratch)
    except OSError as error:
        for path in written:  # all ranks or none: a run is never half there
            path.unlink(missing_ok=True)
        raise _fail(
            run_dir,
            f"{trace_path}: could not write the trace ({error.strerror}); free disk space or choose another --out",
            2,
            scratch,
        ) from None
    return trace_path, manifest


def _record_result(run_dir: Path, traces: list[tuple[Path, Manifest]], exit_code: int) -> RecordResult:
    manifests = [manifest for _, manifest in traces]
    complete = all(m.status == schema.STATUS_COMPLETE for m in manifests)
    return RecordResult(
        run_dir=run_dir,
        trace_path=traces[0][0],
        status=schema.STATUS_COMPLETE if complete else schema.STATUS_PARTIAL,
        exit_code=exit_code,
        error=next(
            (f"rank {m.rank}: {m.error}" if len(manifests) > 1 else m.error for m in manifests if m.error), None
        ),
        steps_recorded=min(m.steps.recorded for m in manifests if m.steps is not None),  # the merge sets steps
        workers_seen=sum(len({(w.loader, w.worker_id) for w in m.workers}) for m in manifests),
        stopped_early=all(m.stopped_early for m in manifests),
        trace_paths=tuple(path for path, _ in traces),
        manifests=tuple(manifests),
    )


def write_traces(
    run_dir: Path,
    inputs: merge.MergeInputs,
    wording: Wording,
    stopped_by: int | None = None,
    replaces: tuple[Path, ...] = (),
) -> RecordResult:
    """Turn what the processes left in the session directory into ``run_dir``'s traces, one per rank, and remove the
    session.

    Args:
        wording: how messages name the training and its schedule.
        stopped_by: the signal (SIGINT, SIGTERM) that stopped ``dlprof record``, if one did: the exit
            code is then 130 or 143, recorded or not.
        replaces: the traces :func:`write_interim` wrote, removed once these are all written (kept otherwise).

    Raises:
        RecordError: nothing was recorded; the run directory is removed, unless ``replaces`` are in it: they are kept,
            and the message says so.
    """
    try:
        results = _share_calibration(_traced_results(run_dir, inputs, wording, stopped_by))
        redactor = _redactor(results, inputs) if inputs.redact else None
        traces: list[tuple[Path, Manifest]] = []
        for result in results:
            traces.append(_write_rank(run_dir, result, inputs, wording, redactor, [path for path, _ in traces]))
    except RecordError as error:
        kept = [path for path in replaces if path.is_file()]
        if not kept:
            raise
        # The trials' recording stands in (read as partial once this record is gone): say where it is.
        raise RecordError(
            f"{error}; the trials' traces written when they ended are kept in {kept[0].parent}", error.exit_code
        ) from None
    for path in replaces:
        path.unlink(missing_ok=True)
    shutil.rmtree(inputs.session_dir, ignore_errors=True)
    exit_code = inputs.exit_code if inputs.exit_code is not None else 0
    return _record_result(run_dir, traces, 128 + stopped_by if stopped_by is not None else exit_code)
