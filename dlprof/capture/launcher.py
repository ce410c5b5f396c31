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

from dlprof import redact, schema
from dlprof.capture import merge
from dlprof.capture.memory import DEFAULT_INTERVAL_MS, MemorySampler
from dlprof.capture.schedule import Schedule
from dlprof.capture.session import ENDED_FILE, ERROR_FILE, SESSION_ENV, SIGNALLED_PREFIX
from dlprof.errors import InputError, RecordError, UsageError

#: Python options that take a value as the next argument (``python -W error script.py``).
_PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
_PR_SET_CHILD_SUBREAPER = 36
#: Seconds a leftover process gets after SIGTERM before SIGKILL.
_TERMINATE_GRACE_S = 3.0
#: Seconds the training process gets after Ctrl-C (or SIGTERM) to save its recording and exit.
INTERRUPT_GRACE_S = 15.0
#: After SIGINT or SIGTERM reached dlprof record, how long the training process has to show it got the
#: signal too (a terminal's Ctrl-C reaches the whole process group) before dlprof passes it on.
FORWARD_AFTER_S = 1.0
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
    #: The name was made up by dlprof: if it is taken, take the next free one instead of failing.
    fresh_name_if_taken: bool = False
    #: ``--redact``: traces with placeholders for host names, the user, arguments and paths (dlprof.redact).
    redact: bool = False


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
            raise InputError(
                f"{program}: not executable; run it as 'bash {program}' or 'python {program}', or make it executable"
            )
        raise InputError(
            f"{program}: no such command; check that it runs without dlprof (is its environment activated?)"
        )
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


class _Signals:
    """SIGINT and SIGTERM that reached ``dlprof record``, in order, with when."""

    def __init__(self) -> None:
        self.received: list[tuple[int, float]] = []

    def __call__(self, signum: int, frame: object) -> None:
        self.received.append((signum, time.monotonic()))

    @property
    def first(self) -> int | None:
        return self.received[0][0] if self.received else None


def _trainer_saw_signal(scratch: Path) -> bool:
    """Whether a recorded process got the signal itself (its handler leaves a marker): then it must not get it twice."""
    return any(scratch.glob(SIGNALLED_PREFIX + "*"))


def _wait(child: subprocess.Popen, signals: _Signals, scratch: Path) -> int:
    """Wait for the command; after SIGINT or SIGTERM, make sure it got the signal, give it INTERRUPT_GRACE_S, then stop
    it.

    A terminal's Ctrl-C (and a scheduler's signal to the process group) reaches the training process
    itself; ``kill -INT <dlprof pid>`` or ``timeout`` reach this process alone, so the signal is passed
    on once when the training process shows no sign of it after FORWARD_AFTER_S. A KeyboardInterrupt
    that lands while DataLoader workers shut down can leave the training process hung at exit (a queue's
    feeder thread waiting on dead workers): the recording is already saved by then, and the user must
    not need a second Ctrl-C.
    """
    forwarded = False
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if not signals.received:
            continue
        signum, since = signals.received[0]
        elapsed = time.monotonic() - since
        if not forwarded and elapsed > FORWARD_AFTER_S:
            forwarded = True
            if not _trainer_saw_signal(scratch):
                try:
                    child.send_signal(signum)
                except ProcessLookupError:
                    pass
        if elapsed > INTERRUPT_GRACE_S:
            child.terminate()
            try:
                child.wait(timeout=_TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            return 128 + signum


def _run_child(argv: list[str], env: dict, memory_interval_ms: int, scratch: Path) -> tuple[int, list, int | None]:
    """Run the command to its end; returns its exit code (as a shell reports it), the memory samples, and the signal
    that stopped dlprof, if one did."""
    _become_subreaper()
    # The training process turns SIGINT and SIGTERM into a partial trace, and this process must live on
    # to merge it. Handlers, not SIG_IGN: an ignored signal would be inherited through exec and the
    # training process would never see it.
    signals = _Signals()
    previous = {signum: signal.signal(signum, signals) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(argv, env=env)
        sampler = MemorySampler(child.pid, memory_interval_ms)
        sampler.start()
        exit_code = _wait(child, signals, scratch)
        samples = sampler.stop()
        if exit_code < 0:  # killed by a signal: report it as a shell does (SIGINT -> 130)
            exit_code = 128 - exit_code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _end_leftovers()
    return exit_code, samples, signals.first


def _claim_run_dir(run_dir: Path) -> str | None:
    """Make ``run_dir`` this record's (its scratch folder, created exclusively); else why it is taken."""
    if run_dir.exists() and any(run_dir.glob("*" + schema.TRACE_SUFFIX)):
        return "already holds a recorded run"
    scratch = run_dir / schema.SCRATCH_DIR
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        scratch.mkdir()  # exclusive: two records never share a scratch folder
    except FileExistsError:
        owner = schema.scratch_owner(scratch)
        if owner is not None and owner != os.getpid():
            return f"is being recorded by another dlprof record (pid {owner})"
        return f"holds the scratch files of a record that did not finish ({scratch}); delete that folder"
    except OSError as error:
        raise InputError(
            f"{run_dir}: cannot create the run directory ({error.strerror}); choose a writable --out"
        ) from None
    try:
        (scratch / schema.SCRATCH_OWNER_FILE).write_text(json.dumps({"pid": os.getpid()}))
    except OSError as error:
        remove_unrecorded(run_dir)
        raise InputError(f"{run_dir}: cannot write there ({error.strerror}); choose another --out") from None
    return None


def prepare_run_dir(request: RecordRequest) -> Path:
    """Create ``out_dir/name`` and its scratch folder for this record alone.

    A name in use (a finished run, or one being written) gets a fresh name (``-2``, ``-3``, ...)
    when the user did not choose it (``request.fresh_name_if_taken``), else a one-line error.
    """
    if not _RUN_NAME.match(request.name):
        raise UsageError(f"--name {request.name!r}: use letters, digits, '.', '_' and '-' only")
    name, n = request.name, 1
    while True:
        run_dir = request.out_dir / name
        taken = _claim_run_dir(run_dir)
        if taken is None:
            return run_dir
        if not request.fresh_name_if_taken:
            raise UsageError(f"{run_dir}: {taken}; choose another --name")
        n += 1
        name = f"{request.name}-{n}"


def write_session_config(scratch: Path, request: RecordRequest) -> dict:
    """Write (and return) what every recording process of this run reads at start-up (:mod:`dlprof.capture.session`)."""
    config = {
        "schedule": {"wait": request.wait, "warmup": request.warmup, "active": request.active},
        "loader_spans": request.loader_spans,
        "reference_steps": request.reference_steps,
        "run_to_end": request.run_to_end,
        "overrides": request.overrides or {},
    }
    (scratch / "config.json").write_text(json.dumps(config))
    return config


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
    """Run ``request.command`` under the profiler and write ``<out_dir>/<name>/<host>_<pid>.<ms>.pt.trace.json.gz`` per
    rank.

    Raises:
        UsageError, InputError: the command or options cannot work; nothing was run.
        RecordError: the training ended before the profiler recorded a step; no trace was written.
    """
    Schedule(request.wait, request.warmup, request.active).check()
    argv = child_argv(request.command)
    run_dir = prepare_run_dir(request)
    scratch = run_dir / schema.SCRATCH_DIR
    write_session_config(scratch, request)
    exit_code, samples, stopped_by = _run_child(argv, _child_env(scratch), request.memory_interval_ms, scratch)
    return write_traces(
        run_dir,
        list(request.command),
        exit_code,
        samples,
        merge.MergeInputs(
            scratch,
            list(request.cli_argv),
            list(request.command),
            exit_code,
            samples,
            request.memory_interval_ms,
            request.overrides,
            redact=request.redact,
        ),
        first_recorded_step=request.wait + request.warmup + 1,
        schedule_options=f"--wait {request.wait} --warmup {request.warmup}",
        schedule_names="--wait/--warmup",
        stopped_by=stopped_by,
    )


def write_traces(
    run_dir: Path,
    script: list[str],
    exit_code: int,
    samples: list,
    inputs: merge.MergeInputs,
    first_recorded_step: int,
    schedule_options: str,
    schedule_names: str,
    stopped_by: int | None = None,
) -> RecordResult:
    """Turn what the processes left in the session directory into ``run_dir``'s traces, one per rank, and remove the
    session.

    Args:
        script: the command that trained (for messages).
        first_recorded_step: the first step the profiler records (for the "too few steps" message).
        schedule_options: how the user set the schedule (for the same message: "--wait 5 --warmup 3").
        schedule_names: the settings to lower (for the same message: "--wait/--warmup").
        stopped_by: the signal (SIGINT, SIGTERM) that stopped ``dlprof record``, if one did: the exit
            code is then 130 or 143, recorded or not.

    Raises:
        RecordError: nothing was recorded; the run directory is removed.
    """
    scratch = inputs.session_dir
    signalled = 128 + stopped_by if stopped_by is not None else None
    failed = signalled or 2
    failed_early = lambda error: (
        f"{' '.join(script)}: failed before the profiler recorded a step ({error}); fix the error shown above and"
        " record again"
    )
    if (scratch / ERROR_FILE).exists():
        raise _fail(run_dir, (scratch / ERROR_FILE).read_text().strip(), failed)
    results = _read_results(scratch)
    for result in results:
        if result.get("provisional"):
            # Written when the window was exported; the process never finished its recording.
            result["error"] = (
                f"the training process {_how_it_ended(exit_code, stopped_by)} before dlprof finished its recording"
            )
    export_errors = [r["export_error"] for r in results if r.get("export_error")]
    if export_errors and not any(r["trace_file"] for r in results):
        raise _fail(
            run_dir,
            f"{' '.join(script)}: could not save the recorded steps ({export_errors[0]}); free disk space or choose"
            " another --out",
            2,
        )
    if not results:
        if _disk_full(scratch):
            raise _fail(
                run_dir,
                f"{scratch}: no space left on device, nothing could be recorded; free disk space or choose another"
                " --out",
                2,
            )
        ended = scratch / ENDED_FILE
        if ended.exists():
            raise _fail(run_dir, failed_early(json.loads(ended.read_text()).get("error")), failed)
        raise _fail(
            run_dir,
            f"{' '.join(script)}: {_how_it_ended(exit_code, stopped_by)} before any of its processes trained (no"
            " optimizer step, no DataLoader iterated); see its output above",
            failed,
        )
    traced = [r for r in results if r["trace_file"] is not None]
    if not traced:
        result = results[0]
        if result["status"] != schema.STATUS_COMPLETE:
            message = failed_early(result["error"])
        else:
            message = (
                f"{' '.join(script)}: ran {result['steps_run']} training steps but the profiler records from step"
                f" {first_recorded_step} on ({schedule_options}); run more steps or lower {schedule_names}"
            )
        raise _fail(run_dir, message, failed)
    for result in results:
        if result["trace_file"] is None:
            print(
                f"dlprof: rank {result['rank']} (pid {result['pid']}) ran {result['steps_run']} steps, too few to"
                " record; its trace is left out",
                file=sys.stderr,
            )

    _share_calibration(traced)
    redactor = _redactor(traced, inputs) if inputs.redact else None
    traces = []
    for result in traced:
        try:
            kineto = orjson.loads((scratch / result["trace_file"]).read_bytes())
        except (OSError, orjson.JSONDecodeError) as error:  # written in part: the disk filled up during the export
            raise _fail(
                run_dir,
                f"{' '.join(script)}: rank {result['rank']}'s recorded steps are incomplete ({error}; no space left on "
                "the device?); free disk space or choose another --out",
                2,
            ) from None
        document = merge.merge_rank(kineto, result, inputs)
        host = result["host"]["hostname"] or socket.gethostname()
        if redactor is not None:
            redactor.redact_value(document)  # in place: the manifest, process and thread names, event names and args
            host = redactor.host_label(host)
        trace_path = run_dir / f"{host}_{result['pid']}.{time.time_ns() // 1_000_000}{schema.TRACE_SUFFIX}"
        try:
            merge.write_gzip_json_atomically(document, trace_path, scratch)
        except OSError as error:
            for written, _ in traces:  # all ranks or none: a run is never half there
                written.unlink(missing_ok=True)
            raise _fail(
                run_dir,
                f"{trace_path}: could not write the trace ({error.strerror}); free disk space or choose another --out",
                2,
            ) from None
        traces.append((trace_path, document[schema.MANIFEST_KEY]))
    shutil.rmtree(scratch, ignore_errors=True)
    manifests = [m for _, m in traces]
    return RecordResult(
        run_dir=run_dir,
        trace_path=traces[0][0],
        status=(
            schema.STATUS_COMPLETE
            if all(m["status"] == schema.STATUS_COMPLETE for m in manifests)
            else schema.STATUS_PARTIAL
        ),
        exit_code=signalled or exit_code,
        error=next(
            (f"rank {m['rank']}: {m['error']}" if len(manifests) > 1 else m["error"] for m in manifests if m["error"]),
            None,
        ),
        steps_recorded=min(m["steps"]["recorded"] for m in manifests),
        workers_seen=sum(len({(w["loader"], w["worker_id"]) for w in m["workers"]}) for m in manifests),
        stopped_early=all(m["stopped_early"] for m in manifests),
        trace_paths=tuple(path for path, _ in traces),
    )


def _redactor(results: list[dict], inputs: merge.MergeInputs) -> redact.Redactor:
    """One Redactor for every rank of the run (a host is the same placeholder in each rank's trace)."""
    manifests = [{"host": r["host"], "process_argv": r.get("process_argv") or []} for r in results]
    manifests.append({"command": inputs.command, "script": inputs.script})
    return redact.for_run(manifests, cwd=os.getcwd())


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


def _child_env(scratch: Path) -> dict:
    """The command's environment: the session, and the bootstrap first on ``PYTHONPATH`` (it reaches every Python
    process the command starts)."""
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
        candidates.sort(
            key=lambda r: (r["step_mode"] == "optimizer", r["trace_file"] is not None, r["steps_run"]), reverse=True
        )
        chosen.append(candidates[0])
        for other in candidates[1:]:
            print(
                f"dlprof: pid {other['pid']} also iterated a DataLoader as rank {rank} ({other['steps_run']} steps, "
                f"no training like pid {candidates[0]['pid']}'s): its recording is left out",
                file=sys.stderr,
            )
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
