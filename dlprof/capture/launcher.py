"""``dlprof record``: run a training command under the recorder and leave finished traces, one per rank.

The command runs in a child process: a Python script through ``dlprof.capture.inject``, any other
command (``torchrun``, ``accelerate launch``, ``swift sft``, a shell script) as it is, followed into
the Python processes that train by the bootstrap ``sitecustomize`` (:mod:`dlprof.capture.session`).
This process samples the memory of every process the command starts, from outside them; waits; makes
sure no rank or DataLoader worker outlives the run; and merges what each rank recorded into
``traces/<run>/``. A run directory either holds finished traces, one per rank that trained (manifest
status ``complete``, or ``partial`` with the error when training failed midway), or no trace at all.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import psutil

from dlprof import schema
from dlprof.capture import merge
from dlprof.capture.session import ENDED_FILE, ERROR_FILE, SESSION_ENV
from dlprof.capture.memory import DEFAULT_INTERVAL_MS, MemorySampler
from dlprof.capture.schedule import Schedule
from dlprof.errors import InputError, RecordError, UsageError

#: Python options that take a value as the next argument (``python -W error script.py``).
_PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
_PR_SET_CHILD_SUBREAPER = 36
#: Seconds a leftover process gets after SIGTERM before SIGKILL.
_TERMINATE_GRACE_S = 3.0
#: Seconds the training process gets after Ctrl-C to save its recording and exit.
INTERRUPT_GRACE_S = 15.0
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class RecordRequest:
    """Everything ``dlprof record`` was asked to do."""

    command: tuple[str, ...]
    out_dir: Path
    name: str
    wait: int
    warmup: int
    active: int
    cli_argv: tuple[str, ...] = ()
    memory_interval_ms: int = DEFAULT_INTERVAL_MS
    loader_spans: bool = True
    #: Unprofiled steps timed after the window (the training's real speed, without the profiler).
    reference_steps: int = 0
    #: Let the training run to its own end; else it is stopped once the reference steps are timed.
    run_to_end: bool = True
    #: DataLoader settings imposed on the script (dlprof sweep): {"num_workers": n}.
    overrides: dict | None = None


@dataclass(frozen=True)
class RecordResult:
    """Where the trace went and how the training ended."""

    run_dir: Path
    trace_path: Path
    status: str
    exit_code: int
    error: str | None
    steps_recorded: int
    workers_seen: int
    #: Training was stopped after the window and the reference steps (not --run-to-end).
    stopped_early: bool = False
    #: One trace per recorded rank, by rank (``trace_path`` is the first).
    trace_paths: tuple[Path, ...] = ()


def _is_python(executable: str) -> bool:
    return re.fullmatch(r"python[0-9.]*", os.path.basename(executable)) is not None


def child_argv(command: tuple[str, ...]) -> list[str]:
    """The command line that runs ``command`` under the recorder.

    ``python [opts] SCRIPT|-m MODULE ARGS`` (or ``SCRIPT.py ARGS``) runs the script through
    :mod:`dlprof.capture.inject`, which also sees how it exits. Any other command (a console script such
    as ``torchrun``, ``accelerate`` or ``swift``, a shell script, ``python -c``) runs as it is: the
    bootstrap ``sitecustomize`` on ``PYTHONPATH`` follows it into the Python processes that train.
    """
    if not command:
        raise UsageError("dlprof record --: no command after '--'; give one, e.g. 'dlprof record -- python train.py'")
    words = list(command)
    if words[0].endswith(".py"):
        words.insert(0, sys.executable)
    program = words[0]
    if shutil.which(program) is None:
        if os.path.exists(program):
            raise InputError(f"{program}: not executable; run it as 'bash {program}' or 'python {program}', or make it executable")
        raise InputError(f"{program}: no such command; check that it runs without dlprof (is its environment activated?)")
    if not _is_python(program):
        return words
    options, i = [], 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        if words[i] == "-c":
            return words  # code on the command line: followed by the bootstrap, as any command
        options.append(words[i])
        if words[i] in _PYTHON_OPTIONS_WITH_VALUE and i + 1 < len(words):
            options.append(words[i + 1])
            i += 1
        i += 1
    target = words[i:]
    if not target:
        raise UsageError(f"dlprof record -- {' '.join(command)}: no script given; add the path of your training script")
    if target[0] == "-m":
        if len(target) < 2:
            raise UsageError("dlprof record -- python -m: no module given; add the module name after -m")
    elif not os.path.isfile(target[0]):
        raise InputError(f"{target[0]}: no such script; give the path of your training script")
    return [program, *options, "-m", "dlprof.capture.inject", *target]


def _become_subreaper() -> None:
    """Orphaned descendants (DataLoader workers of a crashed trainer) are re-parented to us, so we can end them."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _end_leftovers() -> None:
    """Terminate (then kill) any process still descending from us: no worker outlives the record."""
    leftovers = psutil.Process().children(recursive=True)
    for process in leftovers:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(leftovers, timeout=_TERMINATE_GRACE_S)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=_TERMINATE_GRACE_S)


def _wait(child: subprocess.Popen, interrupted: list[float]) -> int:
    """Wait for the training process; after Ctrl-C, give it INTERRUPT_GRACE_S to finish, then stop it.

    A KeyboardInterrupt that lands while DataLoader workers shut down can leave the training process
    hung at exit (a queue's feeder thread waiting on dead workers): the recording is already saved by
    then, and the user must not need a second Ctrl-C.
    """
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if interrupted and time.monotonic() - interrupted[0] > INTERRUPT_GRACE_S:
            child.terminate()
            try:
                child.wait(timeout=_TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            return 128 + signal.SIGINT


def _run_child(argv: list[str], env: dict, memory_interval_ms: int) -> tuple[int, list]:
    _become_subreaper()
    # Ctrl-C reaches the whole process group; the training process turns it into a partial trace,
    # and this process must live on to merge it. A handler, not SIG_IGN: an ignored SIGINT would be
    # inherited through exec and the training process would never see Ctrl-C.
    interrupted: list[float] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(time.monotonic()))
    try:
        child = subprocess.Popen(argv, env=env)
        sampler = MemorySampler(child.pid, memory_interval_ms)
        sampler.start()
        exit_code = _wait(child, interrupted)
        samples = sampler.stop()
        if exit_code < 0:  # killed by a signal: report it as a shell does (SIGINT -> 130)
            exit_code = 128 - exit_code
    finally:
        signal.signal(signal.SIGINT, previous)
        _end_leftovers()
    return exit_code, samples


def _prepare_run_dir(request: RecordRequest) -> Path:
    if not _RUN_NAME.match(request.name):
        raise UsageError(f"--name {request.name!r}: use letters, digits, '.', '_' and '-' only")
    run_dir = request.out_dir / request.name
    if run_dir.exists() and any(run_dir.glob("*" + schema.TRACE_SUFFIX)):
        raise UsageError(f"{run_dir}: already holds a recorded run; choose another --name or delete that directory")
    scratch = run_dir / schema.SCRATCH_DIR
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "spans").mkdir(parents=True)
    return run_dir


def unique_run_name(out_dir: Path, stem: str) -> str:
    """``<stem>-<date>-<time>``, with ``-2``, ``-3``, ... added when ``out_dir`` already holds that name."""
    base = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    name, n = base, 1
    while (out_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def remove_unrecorded(run_dir: Path) -> None:
    """Remove a run directory that holds no trace (its scratch files too): nothing may look like a run."""
    shutil.rmtree(run_dir / schema.SCRATCH_DIR, ignore_errors=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass  # it holds something else


def _fail(run_dir: Path, message: str, exit_code: int) -> RecordError:
    """Remove what this run left (nothing may look like a run) and describe the failure."""
    remove_unrecorded(run_dir)
    return RecordError(message, exit_code)


def record(request: RecordRequest) -> RecordResult:
    """Run ``request.command`` under the profiler and write ``<out_dir>/<name>/<host>_<pid>.<ms>.pt.trace.json.gz`` per rank.

    Raises:
        UsageError, InputError: the command or options cannot work; nothing was run.
        RecordError: the training ended before the profiler recorded a step; no trace was written.
    """
    Schedule(request.wait, request.warmup, request.active).check()
    argv = child_argv(request.command)
    run_dir = _prepare_run_dir(request)
    scratch = run_dir / schema.SCRATCH_DIR
    (scratch / "config.json").write_text(
        json.dumps(
            {
                "schedule": {"wait": request.wait, "warmup": request.warmup, "active": request.active},
                "loader_spans": request.loader_spans,
                "reference_steps": request.reference_steps,
                "run_to_end": request.run_to_end,
                "overrides": request.overrides or {},
            }
        )
    )
    exit_code, samples = _run_child(argv, _child_env(scratch), request.memory_interval_ms)
    return write_traces(
        run_dir, list(request.command), exit_code, samples,
        merge.MergeInputs(scratch, list(request.cli_argv), list(request.command), exit_code, samples, request.memory_interval_ms, request.overrides),
        first_recorded_step=request.wait + request.warmup + 1, schedule_options=f"--wait {request.wait} --warmup {request.warmup}",
        schedule_names="--wait/--warmup",
    )  # fmt: skip


def write_traces(run_dir: Path, script: list[str], exit_code: int, samples: list, inputs: merge.MergeInputs, first_recorded_step: int,
                 schedule_options: str, schedule_names: str) -> RecordResult:  # fmt: skip
    """Turn what the processes left in the session directory into ``run_dir``'s traces, one per rank, and remove the session.

    Args:
        script: the command that trained (for messages).
        first_recorded_step: the first step the profiler records (for the "too few steps" message).
        schedule_options: how the user set the schedule (for the same message: "--wait 5 --warmup 3").
        schedule_names: the settings to lower (for the same message: "--wait/--warmup").

    Raises:
        RecordError: nothing was recorded; the run directory is removed.
    """
    scratch = inputs.session_dir
    if (scratch / ERROR_FILE).exists():
        raise _fail(run_dir, (scratch / ERROR_FILE).read_text().strip(), 2)
    results = _read_results(scratch)
    if not results:
        ended = scratch / ENDED_FILE
        if ended.exists():
            error = json.loads(ended.read_text()).get("error")
            raise _fail(run_dir, f"{' '.join(script)}: failed before the profiler recorded a step ({error}); fix the error shown above and record again", 2)
        raise _fail(
            run_dir,
            f"{' '.join(script)}: ended (exit code {exit_code}) before any of its processes trained (no optimizer step, "
            "no DataLoader iterated); see its output above",
            2,
        )
    traced = [r for r in results if r["trace_file"] is not None]
    if not traced:
        result = results[0]
        if result["status"] != schema.STATUS_COMPLETE:
            message = f"{' '.join(script)}: failed before the profiler recorded a step ({result['error']}); fix the error shown above and record again"
        else:
            message = (
                f"{' '.join(script)}: ran {result['steps_run']} training steps but the profiler records from step {first_recorded_step} on "
                f"({schedule_options}); run more steps or lower {schedule_names}"
            )
        raise _fail(run_dir, message, 2)
    for result in results:
        if result["trace_file"] is None:
            print(f"dlprof: rank {result['rank']} (pid {result['pid']}) ran {result['steps_run']} steps, too few to record; "
                  "its trace is left out", file=sys.stderr)  # fmt: skip

    _share_calibration(traced)
    traces = []
    for result in traced:
        kineto = orjson.loads((scratch / result["trace_file"]).read_bytes())
        document = merge.merge_rank(kineto, result, inputs)
        host = result["host"]["hostname"] or socket.gethostname()
        trace_path = run_dir / f"{host}_{result['pid']}.{time.time_ns() // 1_000_000}{schema.TRACE_SUFFIX}"
        merge.write_gzip_json_atomically(document, trace_path, scratch)
        traces.append((trace_path, document[schema.MANIFEST_KEY]))
    shutil.rmtree(scratch, ignore_errors=True)
    manifests = [m for _, m in traces]
    return RecordResult(
        run_dir=run_dir,
        trace_path=traces[0][0],
        status=schema.STATUS_COMPLETE if all(m["status"] == schema.STATUS_COMPLETE for m in manifests) else schema.STATUS_PARTIAL,
        exit_code=exit_code,
        error=next((f"rank {m['rank']}: {m['error']}" if len(manifests) > 1 else m["error"] for m in manifests if m["error"]), None),
        steps_recorded=min(m["steps"]["recorded"] for m in manifests),
        workers_seen=sum(len({(w["loader"], w["worker_id"]) for w in m["workers"]}) for m in manifests),
        stopped_early=all(m["stopped_early"] for m in manifests),
        trace_paths=tuple(path for path, _ in traces),
    )


def _child_env(scratch: Path) -> dict:
    """The command's environment: the session, and the bootstrap first on ``PYTHONPATH`` (it reaches every Python process the command starts)."""
    env = dict(os.environ)
    env[SESSION_ENV] = str(scratch.resolve())
    package_root = str(Path(__file__).resolve().parents[2])
    bootstrap = str(Path(__file__).resolve().parent / "bootstrap")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (bootstrap, package_root, env.get("PYTHONPATH")) if p)
    return env


def _read_results(scratch: Path) -> list[dict]:
    """The recorded processes' facts, one per rank (by rank).

    Every process that trained recorded itself. Where several share a rank (a helper that iterated a
    DataLoader before the training, say), the one that trained is kept: it stepped an optimizer, left
    a trace, and ran the most steps.
    """
    by_rank: dict[int, list[dict]] = {}
    for path in scratch.glob("result-rank*.json"):
        result = json.loads(path.read_text())
        by_rank.setdefault(result["rank"], []).append(result)
    chosen = []
    for rank, candidates in sorted(by_rank.items()):
        candidates.sort(key=lambda r: (r["step_mode"] == "optimizer", r["trace_file"] is not None, r["steps_run"]), reverse=True)
        chosen.append(candidates[0])
        for other in candidates[1:]:
            print(f"dlprof: pid {other['pid']} also iterated a DataLoader as rank {rank} ({other['steps_run']} steps, "
                  f"no training like pid {candidates[0]['pid']}'s): its recording is left out", file=sys.stderr)  # fmt: skip
    return chosen


def _share_calibration(results: list[dict]) -> None:
    """Ranks calibrate once per machine (local rank 0): give the others on that machine its numbers."""
    keys = ("handoff", "worker_startup")
    by_host = {r["host"].get("hostname"): r["host"] for r in results if any(k in r["host"] for k in keys)}
    for result in results:
        source = by_host.get(result["host"].get("hostname"))
        if source is not None:
            for key in keys:
                if key not in result["host"] and key in source:
                    result["host"][key] = source[key]
