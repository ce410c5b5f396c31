"""The ``torch.profiler`` lifecycle inside the training process: schedule, step, export, and the recording it hands
over (:class:`~dlprof.results.record.RankResult`).

One profiler step per training step: after each ``optimizer.step()`` of the first optimizer that
steps (a global post-hook, so no code change), or, for a script that never steps an optimizer (for
example inference), after each batch a DataLoader returns. Every step is timed by the step clock
(:mod:`dlprof.capture.step_clock`); what the recording says of the machine is :mod:`dlprof.capture.facts`.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from dlprof.capture import probe, spanfile, step_clock, trial_plan, tuned
from dlprof.capture.facts import calibrate, host_facts, loader_config, shm_space, versions
from dlprof.capture.rank_env import RankEnv
from dlprof.capture.step_clock import StepRow
from dlprof.capture.trial_plan import LoaderFacts, Plan
from dlprof.capture.trials import TrialProgress, TrialRunner, not_run
from dlprof.core import manifest, schema, throughput
from dlprof.core.manifest import Schedule, StepClock, Trials
from dlprof.results.analysis import Throughput
from dlprof.results.record import THEN_STOP, ClockReading, RankResult, TrialRequest

#: Batches returned with no optimizer step in between before the profiler steps per batch instead:
#: a few, so that gradient accumulation over a handful of micro-batches is not mistaken for
#: a script without an optimizer.
BATCHES_BEFORE_BATCH_STEPPING = 16
#: Reference steps go on through whole epochs (manifest.whole_epochs_to_time, and the boundaries around
#: them) when epochs are this short or shorter, in batches: speed over whole epochs is then measured,
#: restarts included.
MAX_EPOCH_BATCHES_TO_CROSS = 400
#: Why a file the profiler should have written is missing, as far as dlprof can tell.
UNWRITTEN_CAUSE = "no space left on the device, or a file-size limit?"


class TrainingStopped(SystemExit):
    """Raised at a step boundary once the window, the reference steps and the trials are done (not --run-to-end): a
    SystemExit with code 0, so the script's ``finally`` blocks and atexit handlers run, a user's ``except Exception``
    does not swallow it, and the run ends as complete."""

    def __init__(self) -> None:
        super().__init__(0)


class Recorder:
    """Runs ``torch.profiler`` over the training steps of this process and exports the trace."""

    def __init__(
        self,
        schedule: Schedule,
        session_dir: Path,
        rank_env: RankEnv,
        reference_steps: int = 0,
        run_to_end: bool = True,
        top_level: bool = True,
        trials: TrialRequest | None = None,
        caller_stops: bool = False,
    ):
        """
        Args:
            rank_env: this process's rank, and the ranks of the run and of its machine.
            reference_steps: unprofiled steps to time after the window before training is stopped (at least; see
                :meth:`reference_done`).
            run_to_end: let training run to its own end instead of stopping it after the reference steps.
            top_level: this is the process ``dlprof record`` started. Another process (a launcher's
                rank, a helper) is stopped early only if it steps an optimizer: a helper that merely
                iterates a DataLoader must run its course.
            trials: the in-process trials to run after the reference steps (only when training is stopped early).
            caller_stops: where training would be stopped, set :attr:`stop_requested` instead of raising (the Trainer
                callback stops the Trainer: a SystemExit would end a notebook's kernel).
        """
        self.schedule = schedule
        self.session_dir = session_dir
        self.rank_env = rank_env
        self.rank = rank_env.rank
        self.reference_steps, self.run_to_end, self.top_level = reference_steps, run_to_end, top_level
        self.trial_request = trials
        self.caller_stops, self.stop_requested = caller_stops, False
        # One rank decides when the reference phase ends, what the trials do and when training stops; the others
        # follow its plan (capture/trial_plan.py). Over several machines (one session directory each), each
        # machine's first rank decides, by step counts alone, so that all decide alike.
        self.deterministic = rank_env.world_size > rank_env.local_world_size
        self.decider = rank_env.local_rank == 0 if self.deterministic else rank_env.rank == 0
        self.plan: Plan | None = None
        self.trial_runner: TrialRunner | None = None
        self.after_trials: tuned.AfterTrials | None = None
        self.stopped_early = False
        self.trace_path = session_dir / f"kineto-rank{self.rank}-{os.getpid()}.json"
        self.steps = 0
        self.step_mode: str | None = None
        self.window_start_ns: int | None = None
        # Profiled steps' boundaries (wall, process CPU, run-queue): the main process's CPU per step.
        self.window_clock: list[tuple[int, int, int]] = []
        # Every step, profiled or not: the step clock.
        self.all_steps: list[StepRow] = []
        # Run-queue wait of the training thread: time it was ready to run but the cores were busy
        # (with DataLoader workers, say), which stretches the step without being the step's own work.
        self._main_runq_ns = spanfile.run_queue_clock()
        self._step_begin = step_clock.read_clocks(self._main_runq_ns)
        self._step_wait_ns = 0
        self._step_batches = 0
        self._step_ready = -1
        self._step_epoch_start = False
        self._steps_after_window = 0
        self._after_epoch_starts = 0
        self._fork_probe = step_clock.ForkProbe()
        self._step_fork_probe = False
        self.exported = False
        self.export_error: str | None = None
        self._optimizer_id: int | None = None
        self._batches_since_step = 0
        self._profiler: torch.profiler.profile | None = None
        # /dev/shm as the training found it, before its workers put batches there.
        self._shm = shm_space()

    def start(self) -> None:
        """Start the profiler; the caller forwards optimizer steps and loader events
        (:class:`dlprof.capture.session.Session`)."""
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=self.schedule.wait, warmup=self.schedule.warmup, active=self.schedule.active, repeat=1
            ),
            on_trace_ready=self._export,
        )
        self._profiler.start()
        self._step_begin = step_clock.read_clocks(self._main_runq_ns)

    def on_loader_event(self, event: str, ns: int) -> None:
        """A DataLoader event in this process (:func:`probe.add_loader_callback`)."""
        self._step_wait_ns += ns
        if event == probe.EVENT_EPOCH_START:
            self._step_epoch_start = True
        elif event == probe.EVENT_BATCH:
            if self._step_batches == 0:
                self._step_ready = probe.batches_ready()
            self._step_batches += 1
            self._after_batch()

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer stepped (a global post-hook): the first optimizer to step marks the training steps."""
        if self.step_mode == "batch":
            return
        if self._optimizer_id is None:
            self._optimizer_id = id(optimizer)
            self.step_mode = "optimizer"
        if id(optimizer) == self._optimizer_id:
            self._step()

    def _after_batch(self) -> None:
        self._batches_since_step += 1
        if self.step_mode == "batch":
            self._step()
        elif self.step_mode is None and self._batches_since_step > BATCHES_BEFORE_BATCH_STEPPING:
            self.step_mode = "batch"
            self._step()

    def _step(self) -> None:
        self._batches_since_step = 0
        self.steps += 1
        # The main process's CPU time (all its threads) at each step boundary: what training itself
        # demands of the cores, which no trace event tells.
        reading = step_clock.read_clocks(self._main_runq_ns)
        window_was_open = self.window_start_ns is not None and not self.exported
        profiler = self._profiler
        assert profiler is not None  # steps are counted from start() on
        if profiler.current_action != torch.profiler.ProfilerAction.NONE:
            phase = manifest.PHASE_PROFILED
        elif self.after_trials is not None:
            phase = manifest.PHASE_TUNED
        elif self.trial_runner is not None and self.trial_runner.applied:  # from the step its first switch landed in
            phase = manifest.PHASE_TRIAL
        else:
            phase = manifest.PHASE_AFTER if self.exported else manifest.PHASE_BEFORE
        begin = self._step_begin
        epoch_started = self._step_epoch_start
        self.all_steps.append(
            StepRow(
                phase,
                reading[0] - begin[0],
                reading[1] - begin[1],
                reading[2] - begin[2],
                min(self._step_wait_ns, reading[0] - begin[0]),  # an iterator made before start(): not its wall
                self._step_batches,
                epoch_started,
                self._step_fork_probe,
                self._step_ready,
                *(now - then for now, then in zip(reading[3:], begin[3:], strict=True)),
            )
        )
        self._step_wait_ns = self._step_batches = 0
        self._step_ready = -1
        self._step_epoch_start = False
        profiler.step()
        if self.window_start_ns is None and profiler.current_action != torch.profiler.ProfilerAction.NONE:
            # Batches for the first recorded steps are produced from here on (prefetching).
            self.window_start_ns = reading[0]
            window_was_open = True
        if window_was_open:
            self.window_clock.append(reading[:3])
        if phase == manifest.PHASE_AFTER:
            self._steps_after_window += 1
            if epoch_started:
                self._after_epoch_starts += 1
        probed = self.exported and self._fork_probe.maybe_fork(self._steps_after_window, self._training_loader)
        may_stop = self.top_level or self.step_mode == "optimizer"
        if not self.run_to_end and may_stop and (self.exported or self.export_error is not None):
            self._follow_plan()
        # The next step starts once the profiler's and dlprof's own work (an export, deciding the plan) is done: not
        # training's time.
        self._step_begin = step_clock.read_clocks(self._main_runq_ns)
        self._step_fork_probe = probed

    def _follow_plan(self) -> None:
        """At a step boundary after the window: decide (or read) the plan, ask for the trials' switches that are due,
        and stop training at the plan's step, as every rank does."""
        completed, plan = len(self.all_steps), self.plan
        if self.stop_requested:
            return
        if plan is None:
            plan = self._decide(completed) if self.decider else self._read_plan()
            if plan is None:
                return
            self._start(plan, completed)
        if self.trial_runner is not None:
            self.trial_runner.at_boundary(completed)
        if self.after_trials is not None:
            self.after_trials.at_boundary(completed)
        elif completed >= plan.stop_step:
            if self.trial_runner is not None:
                self.trial_runner.finish()
                if self.trial_request is not None and self.trial_request.then != THEN_STOP:
                    self._train_on(completed)
                    return
            self.stopped_early = self.stop_requested = True
            if not self.caller_stops:
                raise TrainingStopped()

    def _train_on(self, completed: int) -> None:
        """``--then best|keep``: the trials are over and the training goes on; write the recording so far (for the
        report while it trains, and kept should the process die), then switch when the choice comes."""
        assert self.trial_runner is not None and self.trial_request is not None
        ranks = self.rank_env.local_world_size if self.deterministic else self.rank_env.world_size
        runner, then = self.trial_runner, self.trial_request.then
        self.after_trials = tuned.AfterTrials(then, self.session_dir, self.decider, ranks, runner, completed)
        probe.flush()
        self._write_result(replace(self._result(schema.STATUS_PARTIAL, None), provisional=True))
        tuned.mark_done(self.session_dir, self.rank)
        self.after_trials.at_boundary(completed)

    def _decide(self, completed: int) -> Plan | None:
        """The plan, once the reference phase is done (None before): published for the other ranks."""
        if not self.exported or not self.reference_done():
            return None
        training = self._training_loader()
        wall_ms, wait_ms = self._steady_reference(training)
        speed = throughput.measure(wall_ms)
        step_s = 1 / speed.steps_per_s if speed is not None and speed.steps_per_s > 0 else None
        # No setting trains faster than a step without its data wait: the segments must be long enough at that pace.
        fastest_s = (sum(wall_ms) - sum(wait_ms)) / len(wall_ms) / 1000 if wall_ms else None
        margin = trial_plan.RANK_MARGIN_STEPS if self.rank_env.world_size > 1 else 0
        plan = trial_plan.plan_trials(
            self.trial_request,
            self._loader_facts(training),
            completed + margin,
            step_s,
            (completed, self.rank),
            self.deterministic,
            fastest_s,
        )
        if self.rank_env.world_size > 1:
            try:
                trial_plan.write_plan(self.session_dir, plan)
            except OSError as error:  # the other ranks cannot follow: say why the job may not stop
                print(f"dlprof: could not share when training stops with the other ranks ({error})", file=sys.stderr)
        if self.rank == 0 and self.trial_request is not None:
            said = trial_plan.describe(self.trial_request, plan, step_s) if plan.segments else None
            print(said or f"dlprof: no count is tried: {plan.skipped}", file=sys.stderr, flush=True)
        return plan

    def _read_plan(self) -> Plan | None:
        """The deciding rank's plan, once it is published (one stat a step until then)."""
        published = trial_plan.plan_published(self.session_dir)
        return trial_plan.read_plan(self.session_dir) if published else None

    def _start(self, plan: Plan, completed: int) -> None:
        """Follow ``plan`` from the ``completed``-th step boundary on."""
        self.plan = plan
        training = self._training_loader()
        if self.trial_request is None or not plan.segments or training is None:
            return
        progress = TrialProgress(plan) if self.rank == 0 else None
        self.trial_runner = TrialRunner(plan, self.trial_request, training, lambda: len(self.all_steps), progress)
        if completed > plan.trials_start:
            self.trial_runner.notes.append(
                f"rank {self.rank} read rank {plan.decided_by}'s plan at step {completed},"
                f" {completed - plan.trials_start} steps after the trials began: its switches came that much later"
            )

    def _training_loader(self) -> probe.LoaderRecord | None:
        return max(probe.loader_records(), key=lambda r: r.batches, default=None)

    def _short_epochs(self, training: probe.LoaderRecord | None) -> bool:
        return training is not None and training.length is not None and training.length <= MAX_EPOCH_BATCHES_TO_CROSS

    def reference_done(self) -> bool:
        """Enough unprofiled steps: the reference steps, whole epochs when epochs are short, and a steady speed.

        At least ``reference_steps`` after the window; when epochs are short, whole epochs (every batch length once
        per epoch, and the epoch boundaries, workers restarting, included); and enough steady steps by the
        throughput rule (:meth:`_reference_speed`: then throughput.MIN_STEPS steps and throughput.MIN_SECONDS
        seconds), up to manifest.MAX_REFERENCE_FACTOR times ``reference_steps`` (a speed timed over fewer is
        flagged untrusted by the analysis). Deciding by step counts alone (:attr:`deterministic`), the last rule is left
        out: clocks differ from machine to machine.
        """
        after = self._steps_after_window
        if after < self.reference_steps:
            return False
        training = self._training_loader()
        if not self._whole_epochs_timed(training, after):
            return False
        if self.deterministic or after >= manifest.MAX_REFERENCE_FACTOR * self.reference_steps:
            return True
        speed = self._reference_speed(training)
        return speed is not None and throughput.enough(speed.steps, speed.seconds)

    def _whole_epochs_timed(self, training: probe.LoaderRecord | None, after: int) -> bool:
        """Whether whole epochs were timed after the window (always, when epochs are long or unknown)."""
        if not self._short_epochs(training):
            return True
        assert training is not None and training.length is not None  # short epochs have a known length
        epochs = manifest.whole_epochs_to_time(training.length)
        if self._after_epoch_starts >= epochs + 1:  # a boundary, the whole epochs, and the next boundary
            return True
        batches_per_step = self._batches_per_step(training)
        # The boundaries must have come by then (else the loader stopped early, or steps are not batches).
        return (
            after
            >= self.reference_steps + (epochs + 1) * training.length / batches_per_step + manifest.EPOCH_SETTLE_STEPS
        )

    def _batches_per_step(self, training: probe.LoaderRecord) -> float:
        return max(1.0, training.batches / max(1, self.steps))

    def _steady_reference(self, training: probe.LoaderRecord | None) -> tuple[list[float], list[float]]:
        """The steady reference steps so far, their wall and data-wait ms (:func:`step_clock.steady_reference`)."""
        per_step = self._batches_per_step(training) if training is not None else 1.0
        return step_clock.steady_reference(self.all_steps, training, per_step)

    def _reference_speed(self, training: probe.LoaderRecord | None) -> Throughput | None:
        """The steady speed of the reference steps so far (:meth:`_steady_reference`)."""
        return throughput.measure(self._steady_reference(training)[0])

    def _loader_facts(self, training: probe.LoaderRecord | None) -> LoaderFacts | None:
        """What planning the trials needs to know of the training DataLoader."""
        if training is None or training.loader() is None:
            return None
        config = training.config
        per_step = self._batches_per_step(training)
        starts = step_clock.epoch_starts(self.all_steps)
        epoch_steps: int | None
        if training.length:
            epoch_steps = max(1, round(training.length / per_step))
        else:  # an IterableDataset without a length: from the epochs seen
            epoch_steps = starts[-1] - starts[-2] if len(starts) >= 2 else None
        return LoaderFacts(
            num_workers=config.get("num_workers") or 0,
            prefetch_factor=config.get("prefetch_factor"),
            batches_per_step=per_step,
            iterable=bool(config.get("iterable_dataset")),
            epoch_steps=epoch_steps,
            last_epoch_start=starts[-1] if starts else None,
            # A batch that cannot be trimmed without changing the loss rules the padding segment out.
            trimmable_pct=training.trim.droppable_pct if training.trim.refused is None else 0.0,
        )

    def _export(self, profiler: torch.profiler.profile) -> None:
        """Save the window's events (profiler's ``on_trace_ready``), inside the training's step: never raise into it."""
        tmp = self.trace_path.with_suffix(".tmp")
        try:
            profiler.export_chrome_trace(str(tmp))
            if not tmp.is_file():  # Kineto reports a failed write on stderr only
                raise OSError(f"torch.profiler could not write it ({UNWRITTEN_CAUSE})")
            os.replace(tmp, self.trace_path)
        except Exception as error:  # a full disk must not kill the user's training from inside optimizer.step()
            self.export_error = f"{tmp}: {getattr(error, 'strerror', None) or error}"
            print(
                f"dlprof: could not save the recorded steps ({self.export_error}); training goes on unrecorded",
                file=sys.stderr,
            )
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return
        self.exported = True
        # If this process dies from here on (SIGKILL, the out-of-memory killer), the window is kept:
        # this provisional recording stands in for the one finish() would have written.
        self._write_result(replace(self._result(schema.STATUS_PARTIAL, None), provisional=True))
        # The recorded events are saved: release them now, so that they weigh on no later step.
        inner = getattr(profiler, "profiler", None)
        if inner is not None:
            inner.kineto_results = None
            inner._function_events = None
            inner._old_function_events = None
        gc.collect()

    def step_clock_columns(self) -> StepClock:
        """Every step seen, in ms (:func:`step_clock.columns`)."""
        return step_clock.columns(self.all_steps)

    def finish(self, status: str, error: str | None) -> RankResult:
        """Stop profiling (exporting what was recorded) and write this process's recording for the merge."""
        self._fork_probe.reap()
        if self.trial_runner is not None:
            self.trial_runner.finish()  # the training ended during the trials: the loader gets its own settings back
        if self._profiler is not None:
            self._profiler.stop()  # mid-window (a failure, a short script): exports the steps so far
        probe.flush()
        result = self._result(status, error)
        probe.uninstall()  # the calibration's own DataLoader must not be recorded
        # Calibrate only after a run that completed (a failing process should exit promptly), and once per
        # machine: the merge gives the other ranks on it the same numbers.
        if self.exported and result.loaders and status == schema.STATUS_COMPLETE and self.rank_env.local_rank == 0:
            result = replace(result, host=calibrate(result.host))
        self._write_result(result)
        return result

    def _result(self, status: str, error: str | None) -> RankResult:
        """This process's recording for the merge."""
        env = self.rank_env
        return RankResult(
            status=status,
            error=error,
            rank=env.rank,
            world_size=env.world_size,
            local_rank=env.local_rank,
            local_world_size=env.local_world_size,
            process_argv=tuple(getattr(sys, "orig_argv", sys.argv)),
            pid=os.getpid(),
            trace_file=self.trace_path.name if self.exported else None,
            export_error=self.export_error,
            steps_run=self.steps,
            schedule=replace(self.schedule, step_mode=self.step_mode),
            window_start_ns=self.window_start_ns,
            window_clock=tuple(ClockReading(*reading) for reading in self.window_clock),
            step_clock=self.step_clock_columns(),
            stopped_early=self.stopped_early,
            finished_ns=time.time_ns(),
            loaders=tuple(loader_config(r) for r in probe.loader_records()),
            host=host_facts(self._shm),
            versions=versions(),
            trials=self._trials(status, error),
        )

    def _trials(self, status: str, error: str | None) -> Trials | None:
        """The trials for the manifest: what ran, or why none did (None: none were asked for)."""
        request = self.trial_request
        if request is None or self.run_to_end:
            return None
        steps = len(self.all_steps)
        plan = self.plan
        if plan is None:
            if self.export_error is not None:
                return not_run(request, None, "the recorded steps could not be saved, so no trial ran")
            return not_run(
                request, None, f"the training ended after {steps} steps, before the reference steps were done"
            )
        if plan.skipped is not None:
            return not_run(request, plan, plan.skipped)
        if self.trial_runner is None:
            return not_run(request, plan, "no DataLoader was iterated in this process, so none could be switched")
        ended = None
        if self.after_trials is not None:  # the trials ran to their end; the training went on
            return replace(self.trial_runner.manifest(steps, None), then=self.after_trials.then(steps))
        if not self.stopped_early:
            how = f"failed ({error})" if status != schema.STATUS_COMPLETE else "ended by itself"
            ended = f"the training {how} after {steps} steps, before the trials' end at step {plan.stop_step}"
        return self.trial_runner.manifest(steps, ended)

    def _write_result(self, result: RankResult) -> None:
        path = self.session_dir / f"result-rank{self.rank}-{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(asdict(result), indent=1))
            os.replace(tmp, path)
        except OSError as error:  # a full disk: dlprof record says so; the training must not fail for it
            print(f"dlprof: could not save the recording's facts ({path}: {error.strerror})", file=sys.stderr)
