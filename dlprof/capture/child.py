"""The training command as a child process of ``dlprof record``: its command line, its environment, its signals.

The command runs in a child process: a Python script through ``dlprof.capture.inject``, any other
command (``torchrun``, ``accelerate launch``, ``swift sft``, a shell script) as it is, followed into
the Python processes that train by the bootstrap ``sitecustomize`` (:mod:`dlprof.capture.session`).
This process samples the memory of every process the command starts, from outside them; waits, passing
on Ctrl-C and SIGTERM once; and makes sure no rank or DataLoader worker outlives the run.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from dlprof.capture.memory import MemoryReading, MemorySampler
from dlprof.capture.session import SESSION_ENV, SIGNALLED_PREFIX
from dlprof.core.errors import InputError, UsageError

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


def _children() -> set[tuple[int, float]]:
    """This process's children now, by pid and start time (a pid alone can be reused)."""
    found = set()
    for process in psutil.Process().children():
        try:
            found.add((process.pid, process.create_time()))
        except psutil.Error:
            pass
    return found


def _end_leftovers(earlier: set[tuple[int, float]]) -> None:
    """Terminate (then kill) any process still descending from us that the command started: no worker outlives the
    record. The caller's own children from before the command (``earlier``), and theirs, are left alone: a notebook's,
    or the fork server and resource tracker of multiprocessing, which ``dlprof analyze --processes`` starts and
    reuses."""
    leftovers = []
    for process in psutil.Process().children():
        try:
            if (process.pid, process.create_time()) not in earlier:
                leftovers += [process, *process.children(recursive=True)]
        except psutil.Error:
            pass
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


def _wait(child: subprocess.Popen, signals: _Signals, scratch: Path, tick: Callable[[], None] | None = None) -> int:
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
        if tick is not None and not signals.received:
            tick()
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


def run_child(
    argv: list[str],
    env: dict,
    memory_interval_ms: int,
    scratch: Path,
    tick: Callable[[list[MemoryReading]], None] | None = None,
) -> tuple[int, list[MemoryReading], int | None]:
    """Run the command to its end; returns its exit code (as a shell reports it), the memory samples, and the signal
    that stopped dlprof, if one did. ``tick`` is called about every 0.2 s while it runs, with the sampler's list of
    samples (still growing: copy it to keep it)."""
    _become_subreaper()
    earlier = _children()
    # The training process turns SIGINT and SIGTERM into a partial trace, and this process must live on
    # to merge it. Handlers, not SIG_IGN: an ignored signal would be inherited through exec and the
    # training process would never see it.
    signals = _Signals()
    previous = {signum: signal.signal(signum, signals) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(argv, env=env)
        sampler = MemorySampler(child.pid, memory_interval_ms)
        sampler.start()
        exit_code = _wait(child, signals, scratch, None if tick is None else lambda: tick(sampler.samples))
        samples = sampler.stop()
        if exit_code < 0:  # killed by a signal: report it as a shell does (SIGINT -> 130)
            exit_code = 128 - exit_code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _end_leftovers(earlier)
    return exit_code, samples, signals.first


def child_env(scratch: Path) -> dict:
    """The command's environment: the session, and the bootstrap first on ``PYTHONPATH`` (it reaches every Python
    process the command starts)."""
    env = dict(os.environ)
    env[SESSION_ENV] = str(scratch.resolve())
    package_root = str(Path(__file__).resolve().parents[2])
    bootstrap = str(Path(__file__).resolve().parent / "bootstrap")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (bootstrap, package_root, env.get("PYTHONPATH")) if p)
    return env
