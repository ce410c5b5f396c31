"""``dlprof record``: run a training command under the recorder and leave one finished trace.

The training runs in a child process (the user's own interpreter, started on
``dlprof.capture.inject``); this process samples memory from outside, waits, makes sure no
DataLoader worker outlives the run, and merges what was recorded into ``traces/<run>/``. A run
directory either holds a finished trace (manifest status ``complete``, or ``partial`` with the error
when training failed midway) or no trace at all.
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
from dlprof.capture.inject import ERROR_FILE, SESSION_ENV
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


def _is_python(executable: str) -> bool:
    return re.fullmatch(r"python[0-9.]*", os.path.basename(executable)) is not None


def child_argv(command: tuple[str, ...]) -> list[str]:
    """The command that runs ``command`` (``python [opts] SCRIPT|-m MODULE ARGS``) under the recorder."""
    if not command:
        raise UsageError("dlprof record --: no command after '--'; give one, e.g. 'dlprof record -- python train.py'")
    words = list(command)
    if words[0].endswith(".py"):
        words.insert(0, sys.executable)
    python = words[0]
    if not _is_python(python):
        raise UsageError(
            f"dlprof record -- {python}: can only run Python scripts; write the command as "
            f"'python SCRIPT.py ARGS' or 'python -m MODULE ARGS'"
        )
    if shutil.which(python) is None and not os.path.exists(python):
        raise InputError(f"{python}: no such interpreter; use 'python' or the path of your environment's python")
    options, i = [], 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        if words[i] == "-c":
            raise UsageError("dlprof record -- python -c: code strings are not supported; save the code to a .py file and run that")
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
    return [python, *options, "-m", "dlprof.capture.inject", *target]


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


def _fail(run_dir: Path, message: str, exit_code: int) -> RecordError:
    """Remove what this run left (nothing may look like a run) and describe the failure."""
    shutil.rmtree(run_dir / schema.SCRATCH_DIR, ignore_errors=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass
    return RecordError(message, exit_code)


def record(request: RecordRequest) -> RecordResult:
    """Run ``request.command`` under the profiler and write ``<out_dir>/<name>/<host>_<pid>.<ms>.pt.trace.json.gz``.

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
    env = dict(os.environ)
    env[SESSION_ENV] = str(scratch.resolve())
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)

    exit_code, samples = _run_child(argv, env, request.memory_interval_ms)

    script = list(request.command)
    if (scratch / ERROR_FILE).exists():
        raise _fail(run_dir, (scratch / ERROR_FILE).read_text().strip(), 2)
    result_path = scratch / "result-rank0.json"
    if not result_path.exists():
        raise _fail(run_dir, f"{' '.join(script)}: the training process ended (exit code {exit_code}) before dlprof could record; see its output above", 2)
    result = json.loads(result_path.read_text())
    if result["trace_file"] is None:
        needed = request.wait + request.warmup + 1
        if result["status"] != schema.STATUS_COMPLETE:
            message = f"{' '.join(script)}: failed before the profiler recorded a step ({result['error']}); fix the error shown above and record again"
        else:
            message = (
                f"{' '.join(script)}: ran {result['steps_run']} training steps but the profiler records from step {needed} on "
                f"(--wait {request.wait} --warmup {request.warmup}); run more steps or lower --wait/--warmup"
            )
        raise _fail(run_dir, message, 2)

    kineto = orjson.loads((scratch / result["trace_file"]).read_bytes())
    inputs = merge.MergeInputs(scratch, list(request.cli_argv), script, exit_code, samples, request.memory_interval_ms, request.overrides)
    document = merge.merge_rank(kineto, result, inputs)
    host = result["host"]["hostname"] or socket.gethostname()
    trace_path = run_dir / f"{host}_{result['pid']}.{time.time_ns() // 1_000_000}{schema.TRACE_SUFFIX}"
    merge.write_gzip_json_atomically(document, trace_path, scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    manifest = document[schema.MANIFEST_KEY]
    return RecordResult(
        run_dir=run_dir,
        trace_path=trace_path,
        status=manifest["status"],
        exit_code=exit_code,
        error=manifest["error"],
        steps_recorded=manifest["steps"]["recorded"],
        workers_seen=len({(w["loader"], w["worker_id"]) for w in manifest["workers"]}),
        stopped_early=manifest["stopped_early"],
    )
