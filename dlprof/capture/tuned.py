"""The training after its trials (``--then best`` or ``--then keep``): it goes on, and its DataLoader switches to the
chosen setting at one step on every rank.

When the trials end, every rank writes its recording so far (the provisional :class:`RankResult`, trials included) and
a marker, :data:`DONE_MARKER`; ``dlprof record``'s own process merges those into the run's traces (status
``training``), analyses them and writes the setting it chose into the session directory (:data:`CHOICE_FILE`; with
``--then keep`` the script's own settings need no analysis, and the deciding rank takes them at once). The deciding
rank reads the choice at its step boundaries (one ``stat`` a step), and with several ranks publishes it with the step
to switch at, :data:`trial_plan.RANK_MARGIN_STEPS` ahead (:data:`SWITCH_FILE`), which every rank reads as it reads
the plan: no rank waits for another. Until then the training goes on at the last segment's setting (``best``) or its
own (``keep``).

Standard library and the probe only: this runs in the training process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlprof.capture import probe, trial_plan
from dlprof.capture.probe import switch
from dlprof.capture.trials import TrialRunner
from dlprof.core.manifest import Then
from dlprof.results.record import THEN_KEEP

#: The setting ``dlprof record`` chose from the trials' analysis (or why it chose none), for the deciding rank.
CHOICE_FILE = "choice.json"
#: The setting and the step every rank switches at, published by the deciding rank when several ranks run.
SWITCH_FILE = "switch.json"
#: A rank's trials are over and its recording so far is written: ``trials-done-rank<R>-<pid>``.
DONE_MARKER = "trials-done-rank"


def _published(path: Path) -> dict | None:
    """A document another process published (:func:`trial_plan.write_json`): one ``stat`` a step until it is there."""
    return trial_plan.read_json(path) if os.path.exists(path) else None


def choice_document(setting: switch.Setting | None, error: str | None = None) -> dict:
    """What :data:`CHOICE_FILE` and :data:`SWITCH_FILE` hold: a setting, or why there is none."""
    if setting is None:
        return {"error": error or "no setting was chosen"}
    return {
        "num_workers": setting.num_workers,
        "prefetch_factor": setting.prefetch_factor,
        "persistent_workers": setting.persistent_workers,
    }


def _setting_of(document: dict, timeout_s: float) -> switch.Setting | None:
    """The setting in a choice document (None: it holds an error, or is not one dlprof wrote)."""
    workers, prefetch, persistent = (
        document.get("num_workers"),
        document.get("prefetch_factor"),
        document.get("persistent_workers"),
    )
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        return None
    if prefetch is not None and (not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 1):
        return None
    return switch.Setting(workers, prefetch if workers else None, bool(workers and persistent is True), timeout_s)


@dataclass
class _Switched:
    setting: switch.Setting
    first_step: int | None = None
    error: str | None = None


class AfterTrials:
    """Drives the switch after the trials in one training process (every rank has one)."""

    def __init__(
        self,
        mode: str,
        session_dir: Path,
        decider: bool,
        ranks: int,
        runner: TrialRunner,
        trials_end_step: int,
    ):
        """
        Args:
            decider: this rank reads the choice and publishes the switch (rank 0, or each machine's first rank).
            ranks: ranks in this session directory's job; with one, the switch is asked for at once.
            runner: the trials that ran, on the training DataLoader (``runner.record``).
            trials_end_step: the step clock's index of the first step after the trials.
        """
        self.mode = mode
        self.session_dir = session_dir
        self.decider = decider
        self.ranks = ranks
        self.record: probe.LoaderRecord = runner.record
        self.own: switch.Setting = runner.own
        self.trials_end_step = trials_end_step
        self._step_in_progress: Callable[[], int] = runner.step_in_progress
        self.switched: _Switched | None = None
        self.error: str | None = None
        self._published = False

    def at_boundary(self, completed: int) -> None:
        """``completed`` steps are done: take the choice when it is there, and switch at its step."""
        if self.switched is not None or self.error is not None:
            return
        if self.decider and not self._published:
            self._decide(completed)
        if self.ranks > 1:
            published = _published(self.session_dir / SWITCH_FILE)
            if published is not None and completed >= _step_of(published):
                self._switch(published)

    def _decide(self, completed: int) -> None:
        if self.mode == THEN_KEEP:
            document = choice_document(self.own)
        else:
            chosen = _published(self.session_dir / CHOICE_FILE)
            if chosen is None:
                return
            document = chosen
        self._published = True
        if self.ranks > 1:
            document = {**document, "step": completed + trial_plan.RANK_MARGIN_STEPS}
            try:
                trial_plan.write_json(self.session_dir / SWITCH_FILE, document)
            except OSError as error:
                self.error = f"the chosen setting could not be shared with the other ranks ({error.strerror})"
        else:
            self._switch(document)

    def _switch(self, document: dict) -> None:
        setting = _setting_of(document, self.own.timeout_s)
        if setting is None:
            error = document.get("error")
            self.error = error if isinstance(error, str) and error else "the choice could not be read"
            return
        self.switched = _Switched(setting)
        loader = self.record.loader()
        if loader is not None and _same(switch.Setting.of(loader), setting):  # no workers restarted for nothing
            self.switched.first_step = self._step_in_progress()
            return
        switch.request(self.record.loader_id, setting, self._done)

    def _done(self, report: switch.SwitchReport) -> None:
        assert self.switched is not None
        if report.error is not None:
            workers = self.switched.setting.num_workers
            self.switched.error = f"switching to num_workers={workers} failed ({report.error})"
            return
        self.switched.first_step = self._step_in_progress()

    def then(self, steps: int) -> Then:
        """What the training did after its trials, for the manifest; ``steps``: the steps the training took in all."""
        switched = self.switched
        if switched is None or switched.first_step is None:
            why = self.error or (switched.error if switched is not None else None) or self._ended_first(steps)
            return Then(mode=self.mode, trials_end_step=self.trials_end_step, error=why)
        setting = switched.setting
        return Then(
            mode=self.mode,
            trials_end_step=self.trials_end_step,
            num_workers=setting.num_workers,
            prefetch_factor=setting.prefetch_factor,
            persistent_workers=setting.persistent_workers,
            first_step=switched.first_step,
        )

    def _ended_first(self, steps: int) -> str | None:
        """Why no switch happened though nothing failed: the training ended first (the analysis outlasted it). None
        at the trials' end itself (the provisional recording written then: the training goes on)."""
        after = steps - self.trials_end_step
        if after <= 0:
            return None
        ended = f"the training ended {after:,} steps after the trials"
        if self.switched is not None:
            workers = self.switched.setting.num_workers
            return f"{ended}, before its DataLoader gave a batch at num_workers={workers}"
        return f"{ended}, before the setting chosen from their analysis was there (a longer training lets it switch)"


def _step_of(document: dict) -> int:
    step = document.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def _same(a: switch.Setting, b: switch.Setting) -> bool:
    return (a.num_workers, a.prefetch_factor if a.num_workers else None, a.persistent_workers) == (
        b.num_workers,
        b.prefetch_factor if b.num_workers else None,
        b.persistent_workers,
    )


def mark_done(session_dir: Path, rank: int) -> None:
    """Say this rank's trials are over and its recording so far is written (for ``dlprof record``'s process)."""
    try:
        (session_dir / f"{DONE_MARKER}{rank}-{os.getpid()}").touch()
    except OSError:  # a full disk: dlprof record then reports at the training's end only
        pass


def ranks_done(session_dir: Path) -> int:
    """How many ranks have marked their trials over."""
    try:
        return sum(1 for name in os.listdir(session_dir) if name.startswith(DONE_MARKER))
    except OSError:
        return 0
