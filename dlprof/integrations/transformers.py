"""``DlprofCallback``: record a Hugging Face ``Trainer`` run from inside the process, for notebooks and code ``dlprof
record`` cannot wrap.

It leaves the same run directory as ``dlprof record`` (``<out_dir>/<name>/<host>_<pid>.<ms>.pt.trace.json.gz``),
DataLoader worker spans and memory included, through the same machinery: a
:class:`dlprof.capture.session.Session` for this process, and :func:`dlprof.capture.finalize.write_traces`
to merge (and, with ``redact=True``, redact) it. What differs is who starts and ends it:

* The callback's constructor creates the run directory and instruments DataLoaders: the Trainer builds
  its DataLoader inside ``train()``, *before* ``on_train_begin``, so the probe must be in place by then.
* Recording starts with the first DataLoader iteration or optimizer step after ``on_train_begin``
  (nothing the notebook does before ``train()`` is recorded) and is finished at ``on_train_end``.
* Memory is sampled on a thread of this process (``dlprof record`` samples from outside it).
* Training is never stopped with ``SystemExit`` (it would end a notebook's kernel): with
  ``stop_after_window=True`` the callback sets ``control.should_training_stop`` instead.

One callback records one ``train()``, and one callback at a time records in a process (the DataLoader
probe is process-wide). Errors after training are printed, not raised: training's result is never lost
to the profiler.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from dlprof.capture import finalize, interim, merge, probe
from dlprof.capture import session as session_module
from dlprof.capture.memory import MemorySampler
from dlprof.capture.rank_env import RankEnv
from dlprof.capture.run_dir import (
    RUN_NAME_RULE,
    default_run_name,
    is_run_name,
    prepare_run_dir,
    remove_unrecorded,
    write_session_config,
)
from dlprof.core import schema
from dlprof.core.errors import DlprofError, UsageError
from dlprof.core.manifest import Schedule
from dlprof.integrations import trainer_trials
from dlprof.results.record import (
    DEFAULT_MEMORY_INTERVAL_MS,
    DEFAULT_TRIAL_ROUNDS,
    THEN_STOP,
    RecordRequest,
    RecordResult,
)

#: What the callback's messages call the training command (``dlprof record`` names the user's script).
TRAIN_CALL = "trainer.train()"
#: The manifest's status error for a ``train()`` that ended without ``on_train_end`` (an exception, Ctrl-C).
INTERRUPTED = "train() ended without reaching on_train_end (interrupted, or it raised)"

# States of a callback.
_ARMED = "armed"  # DataLoaders instrumented, waiting for train()
_TRAINING = "training"  # inside train(): recording from its first step
_FINISHED = "finished"  # recorded (result or error set)
_REPLACED = "replaced"  # a newer callback took over the process's probe before this one trained
_INACTIVE = "inactive"  # this process is recorded another way (dlprof record), or is not rank 0

#: The callback whose session this process's DataLoader probe serves.
_ACTIVE: DlprofCallback | None = None


def _default_name(out_dir: Path) -> str:
    """``<script>-<date>-<time>``, as ``dlprof record`` names runs (``notebook-...`` in Jupyter), made unique in
    ``out_dir``."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    in_notebook = "ipykernel" in sys.modules
    script = (argv0,) if argv0.endswith(".py") and not in_notebook else ()
    return default_run_name(script, out_dir, fallback="notebook" if in_notebook else "trainer")


def _run_name(name: str | None, out_dir: Path) -> str:
    """The run directory's name: ``name``, else the default one; raises UsageError for a name that is no run name."""
    name = name or _default_name(out_dir)
    if not is_run_name(name):
        raise UsageError(f"DlprofCallback: name={name!r}: {RUN_NAME_RULE}")
    return name


def _check_arguments(wait: int, warmup: int, active: int, reference_steps: int) -> None:
    """Raise UsageError for a schedule that cannot work, said as the callback's arguments (``active=0``)."""
    try:
        Schedule(wait, warmup, active).check()
    except UsageError as error:
        raise trainer_trials.as_arguments(error) from None
    if reference_steps < 0:
        raise UsageError(f"DlprofCallback: reference_steps={reference_steps}: must be >= 0")


def _recorded_elsewhere(stop_after_window: bool, every_rank: bool) -> bool:
    """Whether this process is recorded by ``dlprof record``, or by rank 0's callback (``every_rank``: with trials,
    every rank's callback records, into rank 0's run directory): then the callback does nothing."""
    current = session_module.current()
    if current is not None and not current.finished and (_ACTIVE is None or current is not _ACTIVE._session):
        print(
            "dlprof: DlprofCallback does nothing here: dlprof record is recording this process already", file=sys.stderr
        )
        return True
    ranks = RankEnv.from_environ()
    if stop_after_window and ranks.world_size > 1:
        raise UsageError(
            "DlprofCallback: stop_after_window=True would stop rank 0 only, and the other ranks would hang: "
            "drop it, or record with 'dlprof record -- torchrun ...', which stops every rank"
        )
    return ranks.rank != 0 and not every_rank  # one trace of a rank stands for the others


def _start_session(request: RecordRequest) -> tuple[Path, session_module.Session]:
    """Claim the run directory and start this process's session in it, as ``dlprof record`` would."""
    try:
        run_dir = prepare_run_dir(request.out_dir, request.name, fix="pass another name= or delete that directory")
    except UsageError as error:
        raise UsageError(f"DlprofCallback: {error}") from None
    scratch = run_dir / schema.SCRATCH_DIR
    config = write_session_config(scratch, request)
    try:
        return run_dir, session_module.start_in_process(scratch, config)
    except BaseException:
        remove_unrecorded(run_dir)
        raise


def headline_message(run_dir: Path) -> str:
    """The recorded run's answer, the first line of its report (``dlprof: <headline>``), for the end of ``train()``;
    one line saying why where it cannot be analysed (never raises: training's result is never lost to dlprof)."""
    try:
        from dlprof.workflows.analyze import build_report

        headline = build_report(run_dir).runs[0].advice.headline
    except DlprofError as failure:
        return f"dlprof: no headline: {failure}"
    except Exception as failure:  # a dlprof bug must not cost the user the training's result
        return f"dlprof: no headline: could not analyse {run_dir}: {type(failure).__name__}: {failure}"
    return f"dlprof: {headline.text}" if headline is not None else "dlprof: no headline (nothing was advised)"


class DlprofCallback(TrainerCallback):
    """Record a ``Trainer``'s training as ``dlprof record`` would, into ``<out_dir>/<name>/``.

    Create it right before the Trainer that uses it: it instruments the DataLoaders created from then on.
    Example::

        from dlprof.hf import DlprofCallback

        callback = DlprofCallback(name="baseline")
        trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[callback])
        trainer.train()                   # prints: dlprof: trace traces/baseline/<host>_<pid>.<ms>.pt.trace.json.gz ...
                                          # and the report's headline: dlprof: num_workers 1 -> 2: ...
        report = dlprof.analyze(callback.result.run_dir)

    One callback records one ``train()``. A second ``train()`` with the same callback raises
    :class:`~dlprof.core.errors.UsageError` before training starts (add a new ``DlprofCallback`` instead). A
    newer callback replaces one that has not trained yet (re-running a notebook cell); one whose
    ``train()`` was interrupted is finished as ``partial`` then, or by :meth:`finish`. Under
    ``dlprof record``, or in a process whose ``RANK`` is not 0, the callback does nothing: there the
    process is recorded by ``dlprof record``, or by rank 0's callback.

    Attributes:
        result: the :class:`~dlprof.results.record.RecordResult` once ``train()`` has ended (None before,
            and when nothing could be recorded).
        error: why no trace was written (a :class:`~dlprof.core.errors.DlprofError`), else None.
        run_dir: the run directory (None when the callback does nothing).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike = "traces",
        name: str | None = None,
        wait: int = 5,
        warmup: int = 3,
        active: int = 20,
        reference_steps: int = 40,
        stop_after_window: bool = False,
        loader_spans: bool = True,
        redact: bool = False,
        try_workers: str | Sequence[int] | None = None,
        trial_steps: int | None = None,
        trial_rounds: int = DEFAULT_TRIAL_ROUNDS,
        then: str = THEN_STOP,
    ):
        """
        Args:
            out_dir: directory that receives the run directory.
            name: run directory name (letters, digits, ``.``, ``_``, ``-``); default ``<script>-<date>-<time>``.
            wait, warmup, active: the profiler schedule, in training (optimizer) steps.
            reference_steps: unprofiled steps timed after the window: the training's real speed, which
                ``dlprof analyze`` calibrates its predictions to.
            stop_after_window: stop training (``control.should_training_stop``) once the window and the
                reference steps are recorded; by default training runs to its own end.
            loader_spans: record dataset fetch, tokenizer and collate spans in the loader processes.
            redact: write the trace safe to post, as ``dlprof record --redact`` does: host names, the user,
                command-line arguments and paths become placeholders.
            try_workers: ``num_workers`` counts to try inside this ``train()`` after the reference steps, as
                ``dlprof record --try-workers`` does (``[0, 2, 4]`` or ``"0,2,4"``); each is measured in turn, in
                ``trial_rounds`` rounds of ``trial_steps`` steps (default: from the measured step time).
            then: after the trials, ``"stop"`` the training (``control.should_training_stop``), or train on at the
                ``"best"`` setting (the trials' traces are analysed between two steps, and the DataLoader switched),
                or at the script's own (``"keep"``); the report then checks the speed held.

        Raises:
            UsageError: a bad schedule or name, or a run directory that already holds a recorded run.
        """
        global _ACTIVE
        self.out_dir = Path(out_dir)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.reference_steps = reference_steps
        self.stop_after_window = stop_after_window
        self.loader_spans = loader_spans
        self.redact = redact
        self.result: RecordResult | None = None
        self.error: DlprofError | None = None
        self.run_dir: Path | None = None
        self._session: session_module.Session | None = None
        self._sampler: MemorySampler | None = None
        _check_arguments(wait, warmup, active, reference_steps)
        self.trials = trainer_trials.trial_request(try_workers, trial_steps, trial_rounds, then, stop_after_window)
        self._watcher: interim.TrialsWatcher | None = None
        ranks = RankEnv.from_environ()
        # With trials every rank records (each switches its own DataLoader), into rank 0's run directory.
        self._ranks = ranks.world_size if self.trials is not None else 1
        self._rank = ranks.rank if self._ranks > 1 else 0
        if self._ranks > 1 and name is None:
            raise UsageError("DlprofCallback: try_workers with several ranks: give name=, the same on every rank")
        if _recorded_elsewhere(stop_after_window, every_rank=self._ranks > 1):
            self._state = _INACTIVE
            return
        self.name = _run_name(name, self.out_dir)
        if _ACTIVE is not None:  # first: an interrupted recording it ends may be this name's
            _ACTIVE._make_way()
        if self._rank == 0:
            self.run_dir, self._session = _start_session(self._request())
        else:
            self.run_dir, scratch, config = trainer_trials.join_rank0(self.out_dir, self.name, self._rank)
            self._session = session_module.start_in_process(scratch, config)
        # Not before train(): a DataLoader iterated or an optimizer stepped in the notebook meanwhile
        # must not start the recording. (The session's "helper" state records nothing.)
        self._session.helper = True
        self._state = _ARMED
        _ACTIVE = self

    def _request(self) -> RecordRequest:
        """What this callback records, as ``dlprof record`` would be asked it.

        The recorder never raises SystemExit here (it would end a notebook's kernel): ``stop_after_window``, and the
        trials' end with ``then="stop"``, stop training through the Trainer's control instead.
        """
        return RecordRequest(
            command=(),
            out_dir=self.out_dir,
            name=self.name,
            wait=self.wait,
            warmup=self.warmup,
            active=self.active,
            loader_spans=self.loader_spans,
            reference_steps=self.reference_steps,
            run_to_end=self.trials is None,
            redact=self.redact,
            trials=self.trials,
            caller_stops=True,
        )

    # ------------------------------------------------------------------------------------- Trainer events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._state == _INACTIVE:
            return
        if self._state == _TRAINING:  # the previous train() was interrupted: keep what it recorded
            self._finish_run(INTERRUPTED)
        if self._state == _REPLACED:
            raise UsageError(
                "DlprofCallback: this callback was replaced by one created after it (one records at a time); "
                "pass the newer one to the Trainer"
            )
        if self._state == _FINISHED:
            where = f"into {self.run_dir}" if self.result is not None else "(no trace)"
            raise UsageError(
                f"DlprofCallback: this callback recorded one train() already {where}; to record another, "
                "replace it: trainer.remove_callback(DlprofCallback); trainer.add_callback(DlprofCallback(name=...))"
            )
        assert self._session is not None and self.run_dir is not None  # set in every state but _INACTIVE
        if self._rank == 0:  # rank 0's memory stands for the others' (their workers are not sampled)
            self._sampler = MemorySampler(os.getpid(), DEFAULT_MEMORY_INTERVAL_MS)
            self._sampler.start()
        if self._rank == 0 and self.trials is not None and self.trials.then != THEN_STOP:
            from dlprof.workflows.record import trials_choice

            session = self._session
            self._watcher = interim.TrialsWatcher(
                self.run_dir,
                session.session_dir,
                lambda samples: self._merge_inputs(session, samples),
                multi_node=False,
                choose=trials_choice(self.trials.then),
            )
        self._state = _TRAINING
        self._session.helper = False  # the first DataLoader iteration or optimizer step from now on starts recording

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._state != _TRAINING:
            return
        assert self._session is not None  # every state but _INACTIVE has its session
        recorder = self._session.recorder
        if recorder is None:
            return
        if self._watcher is not None and recorder.after_trials is not None and self._sampler is not None:
            # The trials are over: their traces are analysed here, between two steps, and the setting chosen.
            self._watcher.tick(self._sampler.samples)
        if recorder.stop_requested or (self.stop_after_window and recorder.exported and recorder.reference_done()):
            recorder.stopped_early = True
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._state == _TRAINING:
            self._finish_run(None)

    # ------------------------------------------------------------------------------------- finishing

    def finish(self) -> RecordResult | None:
        """Finish now: after a ``train()`` that was interrupted (its trace is then ``partial``), or to drop
        a callback that never trained (its empty run directory is removed). ``on_train_end`` calls this
        itself; calling it again does nothing.

        Returns:
            :attr:`result`.
        """
        if self._state == _TRAINING:
            self._finish_run(INTERRUPTED)
        elif self._state == _ARMED:
            self._make_way()
        return self.result

    def _make_way(self) -> None:
        """Give up this process's probe to a newer callback (or to nobody): end a recording left unfinished."""
        global _ACTIVE
        if self._state == _TRAINING:
            self._finish_run(INTERRUPTED)
        elif self._state == _ARMED:
            assert self._session is not None and self.run_dir is not None  # set in every state but _INACTIVE
            self._session.finished = True
            self._detach()
            remove_unrecorded(self.run_dir)
            self._state = _REPLACED
        if _ACTIVE is self:
            _ACTIVE = None

    def _finish_run(self, error: str | None) -> None:
        """End the recording, merge it into the run directory and say where the trace is (never raises)."""
        session, run_dir = self._session, self.run_dir
        assert session is not None and run_dir is not None  # set in every state but _INACTIVE
        self._state = _FINISHED
        if error is not None:
            session.fail(error)
        try:
            session.finish(top_level=True)
        finally:
            samples = self._sampler.stop() if self._sampler is not None else []
            self._detach()
        if self._rank != 0:  # rank 0 merges every rank's recording into the run's traces
            return
        if self._ranks > 1:
            trainer_trials.wait_for_ranks(session.session_dir, self._ranks)
        try:
            written = self._watcher.written if self._watcher is not None else ()
            inputs = self._merge_inputs(session, samples)
            self.result = finalize.write_traces(run_dir, inputs, self._wording(), replaces=written)
        except DlprofError as failure:
            self.error = failure
            print(f"dlprof: no trace written: {failure}", file=sys.stderr)
            return
        except Exception as failure:  # a dlprof bug must not cost the user the training's result
            self.error = DlprofError(f"could not write the trace: {type(failure).__name__}: {failure}")
            print(f"dlprof: {self.error}", file=sys.stderr)
            return
        result = self.result
        status = result.status if result.error is None else f"{result.status}: {result.error}"
        print(
            f"dlprof: trace {result.trace_path} ({result.steps_recorded} steps recorded, {status},"
            f" {result.workers_seen} DataLoader worker(s) seen); analyse it with: dlprof analyze {result.run_dir}"
        )
        print(headline_message(result.run_dir))

    def _merge_inputs(self, session: session_module.Session, samples: list) -> merge.MergeInputs:
        """What the merge knows beyond the session: the callback's arguments stand for the command line."""
        command = [
            "dlprof.hf.DlprofCallback",
            f"out_dir={self.out_dir}",
            f"name={self.name}",
            f"wait={self.wait}",
            f"warmup={self.warmup}",
            f"active={self.active}",
            f"reference_steps={self.reference_steps}",
            f"stop_after_window={self.stop_after_window}",
            f"loader_spans={self.loader_spans}",
            *(["redact=True"] if self.redact else []),
        ]
        if self.trials is not None:
            counts = ",".join(str(count) for count in self.trials.counts)
            command += [f"try_workers={counts}", f"trial_rounds={self.trials.rounds}", f"then={self.trials.then}"]
            command += [f"trial_steps={self.trials.trial_steps}"] if self.trials.trial_steps is not None else []
        return merge.MergeInputs(
            session_dir=session.session_dir,
            command=tuple(command),
            script=tuple(sys.argv),
            exit_code=0,
            memory_samples=samples,
            memory_interval_ms=DEFAULT_MEMORY_INTERVAL_MS,
            redact=self.redact,
        )

    def _wording(self) -> finalize.Wording:
        return finalize.Wording(
            command=TRAIN_CALL,
            first_recorded_step=self.wait + self.warmup + 1,
            schedule_options=f"wait={self.wait}, warmup={self.warmup}",
            schedule_names="wait/warmup",
        )

    def _detach(self) -> None:
        """Leave this process as it was: no DataLoader probe, no optimizer hook, no SIGTERM or SIGINT handler of
        ours."""
        session = self._session
        if session is None:
            return
        session.recorder = None  # a finished session ignores optimizer steps and loader events from now on
        probe.uninstall()  # idempotent; the recorder already did it if it recorded
        try:
            # The session's global optimizer post-hook (outside any optimizer step here, so safe to remove).
            from torch.optim import optimizer as optimizer_module

            hooks = optimizer_module._global_optimizer_post_hooks
            for key, hook in list(hooks.items()):
                owner: object = getattr(hook, "__self__", None)  # a bound method's instance
                if owner is session:
                    del hooks[key]
        except Exception:
            pass  # the hook stays, and does nothing
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) == session._terminated:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if signal.getsignal(signal.SIGINT) == session._interrupted:
                    signal.signal(signal.SIGINT, signal.default_int_handler)
            except (ValueError, OSError):
                pass
