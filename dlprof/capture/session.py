"""One process's part in a recording: armed in every Python process a command starts, recording in those that train.

``dlprof record -- COMMAND`` puts :mod:`dlprof.capture.bootstrap` first on ``PYTHONPATH`` and names a
session (scratch) directory in ``DLPROF_SESSION``. Every Python process the command starts (the
launcher, its ranks, helpers, spawned DataLoader workers) then arms this module at start-up, and it
costs those that never train next to nothing:

1. once ``torch`` is imported, DataLoaders are instrumented (their settings, and spans inside their
   workers) and one global optimizer post-hook and one loader callback are registered;
2. the process's first training step (an optimizer step, or iterating a DataLoader in the process
   itself) starts the profiler. Its rank is ``RANK`` from the environment (torchrun, accelerate and
   deepspeed set it), else 0. When several processes of one rank record (a helper that iterated a
   DataLoader, say), ``dlprof record`` keeps the one that trained: it stepped an optimizer, and the most;
3. the recording is finished when the process exits: normally, by an uncaught exception
   (``partial``), or stopped with SIGTERM, as torchrun stops its workers (``partial``).

The decision is taken from what the process does, never from its command's name: a launcher (the
torchrun agent, ``accelerate``, ms-swift's CLI) imports torch but neither steps an optimizer nor
iterates a DataLoader.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dlprof.capture import plain_clock
from dlprof.core import schema

#: Environment variable naming the session (scratch) directory of this recording.
SESSION_ENV = "DLPROF_SESSION"
#: File in the session directory holding a DlprofError raised inside a training process.
ERROR_FILE = "error.txt"
#: How the top-level process ended when it failed without recording: its error, one line of text.
ENDED_FILE = "ended.txt"
#: The recording's settings (schedule, loader spans, reference steps, ...), written by
#: :func:`dlprof.capture.run_dir.write_session_config` and read by every process at start-up.
CONFIG_FILE = "config.json"
#: A recorded process that got SIGINT or SIGTERM leaves ``signalled-<pid>``: ``dlprof record`` then
#: knows the signal arrived and does not pass it on a second time.
SIGNALLED_PREFIX = "signalled-"
#: Session sub-folder of span files: ``spans/<pid>/`` holds a training process's and its workers' spans.
SPANS_DIR = "spans"


def spans_dir_of(session_dir: Path, pid: int) -> Path:
    """Where the training process ``pid`` and its DataLoader workers write their spans."""
    return session_dir / SPANS_DIR / str(pid)


class Session:
    """This process's recording: armed, then recording once it trains."""

    def __init__(self, session_dir: Path, config: dict):
        self.session_dir = session_dir
        self.config = config
        self.recorder: Any = None  # a capture.recorder.Recorder once this process trains
        self.helper = False  # not recording, for good (the session is gone)
        self.status = schema.STATUS_COMPLETE
        self.error: str | None = None
        self.finished = False
        self.exit_hooks = False  # finish at exit (processes dlprof did not start itself)
        #: The signal (SIGTERM) that is stopping this process, once its handler ran.
        self.terminated_by: int | None = None
        self._instrumented = False
        self._lock = threading.Lock()
        #: A plain launch's step timer (``dlprof record --plain-launch``): this session records nothing.
        self.plain_timer: Any = None

    # --------------------------------------------------------------------------------- arming

    def on_torch_imported(self) -> None:
        """Instrument DataLoaders and watch for the first training step (once torch is importable)."""
        if self._instrumented:
            return
        self._instrumented = True
        from torch.optim.optimizer import register_optimizer_step_post_hook

        plain = self.config.get(plain_clock.CONFIG_KEY)
        if plain is not None:  # only the steps' times: no spans, no profiler, nothing in the DataLoader
            self.plain_timer = plain_clock.PlainClock(self.session_dir, int(plain["stop_step"]))
            register_optimizer_step_post_hook(self._plain_stepped)
            atexit.register(self.finish)  # a training that ends before the last step to time: what it timed
            return
        from dlprof.capture import probe

        probe.install(
            str(spans_dir_of(self.session_dir, os.getpid())),
            spans=self.config.get("loader_spans", True),
            overrides=self.config.get("overrides"),
        )
        # One hook each, for the process's whole life: hooks must not be added or removed while torch
        # iterates over them (inside an optimizer step), so these dispatch to the recorder once it exists.
        register_optimizer_step_post_hook(self._optimizer_stepped)
        probe.add_loader_callback(self._loader_event)

    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._stop_if_terminated()
        if self.recorder is not None:
            self.recorder.on_optimizer_step(optimizer)
        elif not self.helper and not self.finished:
            self.start_recording()

    def _plain_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.plain_timer.on_optimizer_step(optimizer)

    def _loader_event(self, event: str, ns: int) -> None:
        self._stop_if_terminated()
        if self.recorder is not None:
            self.recorder.on_loader_event(event, ns)
        elif not self.helper and not self.finished and not _in_dataloader_worker():
            from dlprof.capture import probe

            if event == probe.EVENT_EPOCH_START and self.start_recording():
                assert self.recorder is not None  # start_recording() returned True: it set the recorder
                self.recorder.on_loader_event(event, ns)  # the first step begins with this iteration

    # --------------------------------------------------------------------------------- recording

    def start_recording(self) -> bool:
        """Start recording this process (it trains); returns whether it records."""
        with self._lock:
            if self.recorder is not None or self.helper:
                return self.recorder is not None
            if not self.session_dir.is_dir():  # dlprof record is gone (stopped): just train
                self.helper = True
                return False
            from dlprof.capture.rank_env import RankEnv
            from dlprof.capture.recorder import Recorder
            from dlprof.capture.trial_plan import request_from_config
            from dlprof.core.manifest import Schedule

            recorder = Recorder(
                Schedule(**self.config["schedule"]),
                self.session_dir,
                RankEnv.from_environ(),
                reference_steps=self.config.get("reference_steps", 0),
                run_to_end=self.config.get("run_to_end", True),
                top_level=not self.exit_hooks,
                trials=request_from_config(self.config.get("trials")),
                caller_stops=self.config.get("caller_stops", False),
            )
            recorder.start()
            self.recorder = recorder
            self._stop_cleanly_on_sigterm()
            if self.exit_hooks:
                # Registered now, not at start-up: exit handlers run last-registered first, so this one
                # finishes the recording before those of torch and multiprocessing (registered on import)
                # have shut DataLoader machinery down.
                atexit.register(self.finish)
            return True

    def _stop_cleanly_on_sigterm(self) -> None:
        """torchrun (and schedulers) stop ranks with SIGTERM: end as after Ctrl-C, leaving a partial trace.

        Both signals also leave a marker for ``dlprof record`` (:data:`SIGNALLED_PREFIX`). Handlers the
        script installed itself are left alone.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, self._terminated)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._interrupted)
        except (ValueError, OSError):
            pass

    def _mark_signalled(self) -> None:
        try:
            (self.session_dir / f"{SIGNALLED_PREFIX}{os.getpid()}").touch()
        except OSError:
            pass

    def _terminated(self, signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the export short
        self.terminated_by = signum
        self._mark_signalled()
        self.fail(f"stopped by {signal.Signals(signum).name}")
        raise SystemExit(128 + signum)

    def _stop_if_terminated(self) -> None:
        """Raise the SystemExit of a SIGTERM again, at a step boundary, if the first one was swallowed.

        A signal handler runs wherever the main thread is: inside a ``__del__``, a weakref callback or a
        Python callback of torch's C++ code, an exception is printed ("Exception ignored in ...") and the
        process trains on, with SIGTERM ignored from then on. The next optimizer step or DataLoader event
        ends it, as the signal asked.
        """
        if self.terminated_by is not None and not self.finished:
            raise SystemExit(128 + self.terminated_by)

    def _interrupted(self, signum: int, frame: Any) -> None:
        self._mark_signalled()
        signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as without dlprof

    # --------------------------------------------------------------------------------- finishing

    def fail(self, error: str) -> None:
        """Mark the recording partial (the first reason given is kept)."""
        if self.status == schema.STATUS_COMPLETE:
            self.status, self.error = schema.STATUS_PARTIAL, error

    def finish(self, top_level: bool = False) -> None:
        """Export and write this process's recording for the merge (once).

        Args:
            top_level: this is the process ``dlprof record`` started; if it never trained and failed,
                say how it ended (:data:`ENDED_FILE`), so that ``dlprof record`` can tell the user why
                nothing was recorded.
        """
        if self.finished:
            return
        self.finished = True
        if self.plain_timer is not None:
            self.plain_timer.write()
            return
        if self.recorder is None:
            if top_level and self.status != schema.STATUS_COMPLETE:
                (self.session_dir / ENDED_FILE).write_text(str(self.error))
            return
        try:
            self.recorder.finish(self.status, self.error)
        except Exception as error:  # never hide the script's own outcome
            print(f"dlprof: could not finish the recording: {error}", file=sys.stderr)


def _in_dataloader_worker() -> bool:
    from dlprof.capture import probe

    return probe.in_worker()


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Calls the session's ``on_torch_imported`` right after ``import torch`` has run, in whatever process imports
    it."""

    def __init__(self, session: Session):
        self.session = session

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        session = self.session

        def exec_then_instrument(module: Any) -> None:
            exec_module(module)
            _safely(session.on_torch_imported)

        loader.exec_module = exec_then_instrument
        return spec


def _safely(action: Any) -> None:
    try:
        action()
    except Exception as error:  # dlprof must never stop the user's program
        print(
            f"dlprof: instrumentation disabled in pid {os.getpid()}: {type(error).__name__}: {error}", file=sys.stderr
        )


_SESSION: Session | None = None


def current() -> Session | None:
    """This process's session, if it is armed."""
    return _SESSION


def arm(exit_hooks: bool = True) -> Session | None:
    """Arm this process for the recording named by ``DLPROF_SESSION`` (idempotent; ``None`` outside a recording).

    Args:
        exit_hooks: finish the recording at exit, and mark it partial on an uncaught exception (for
            processes dlprof did not start itself; ``dlprof.capture.inject`` finishes explicitly).
    """
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    directory = os.environ.get(SESSION_ENV)
    if not directory:
        return None
    session_dir = Path(directory)
    try:
        config = json.loads((session_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None  # a stale variable from an earlier recording: run unrecorded
    _SESSION = session = Session(session_dir, config)
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "optim"):
        _safely(session.on_torch_imported)
    else:
        sys.meta_path.insert(0, _AfterTorchImport(session))
    if exit_hooks:
        previous = sys.excepthook

        def excepthook(kind: type, value: BaseException, traceback: Any) -> None:
            session.fail(describe_failure(value))
            previous(kind, value, traceback)

        sys.excepthook = excepthook
        session.exit_hooks = True
    return session


def describe_failure(error: BaseException) -> str:
    """One line for the manifest's ``error``: how the script ended."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted (KeyboardInterrupt)"
    if isinstance(error, SystemExit):
        if isinstance(error.code, int):
            return f"the script exited with code {error.code}"
        return f"the script exited: {error.code}"  # sys.exit("message") prints it and exits 1
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def start_in_process(session_dir: Path, config: dict) -> Session:
    """Make a session for a recording this process runs itself, without ``dlprof record``
    (:class:`dlprof.hf.DlprofCallback`).

    The session becomes this process's (:func:`current`): DataLoaders created from now on are
    instrumented, and the process records from its first training step. No exit hooks: the caller
    finishes the recording (``session.finish(top_level=True)``) and merges it.

    Args:
        session_dir: the scratch directory, holding :data:`CONFIG_FILE` (the same settings as ``config``).
        config: schedule, loader_spans, reference_steps, run_to_end, overrides and trials, as ``dlprof record`` writes
            them.

    Raises:
        UsageError: another recording is under way in this process (``dlprof record``'s, or one not finished).
    """
    global _SESSION
    if _SESSION is not None and not _SESSION.finished:
        from dlprof.core.errors import UsageError

        raise UsageError(
            f"a dlprof recording is already under way in this process (session {_SESSION.session_dir}); "
            "let it finish before starting another"
        )
    session = Session(session_dir, config)
    session.on_torch_imported()
    _SESSION = session
    return session
