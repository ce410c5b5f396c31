"""The in-process trials in the training process: the plan's segments run one after another on the training DataLoader.

After the reference steps, :class:`TrialRunner` asks the probe (:mod:`dlprof.capture.probe.switch`) to switch the
training DataLoader to each planned setting at its segment's first step; the switch happens at the loader's next
``__next__`` (inside that step's wait), or where its next epoch starts (an IterableDataset). What each switch cost and
the step it landed in become the manifest's :class:`~dlprof.core.manifest.Trials`; the analysis measures each segment's
speed from the step clock. When the trials end (or the training does), the loader gets its own settings back for the
epochs that follow.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from dlprof.capture import probe
from dlprof.capture.probe import switch, trim
from dlprof.capture.trial_plan import Plan, PlannedSegment
from dlprof.core.manifest import Trials, TrialSegment
from dlprof.results.record import TrialRequest

#: Seconds between two redraws of the progress bar on a terminal.
PROGRESS_REDRAW_S = 0.25
#: Characters of the progress bar.
PROGRESS_WIDTH = 24


def own_setting(record: probe.LoaderRecord) -> switch.Setting:
    """The settings the script gave its DataLoader."""
    config = record.config
    workers = config.get("num_workers") or 0
    return switch.Setting(
        workers,
        config.get("prefetch_factor") if workers else None,
        bool(workers and config.get("persistent_workers")),
        config.get("timeout_s") or 0.0,
    )


@dataclass
class _Applied:
    """A segment whose switch happened: in which step, and what it cost."""

    first_step: int
    report: switch.SwitchReport


class TrialProgress:
    """The trials' progress on stderr: one line redrawn in place on a terminal, else a line per segment."""

    def __init__(self, plan: Plan, stream: TextIO | None = None):
        self.plan = plan
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown_segment = -1
        self._drawn_s = 0.0
        self._open = False

    def update(self, completed: int) -> None:
        """``completed`` steps are done."""
        segments = self.plan.segments
        current = sum(1 for s in segments if s.first_step <= completed) - 1
        if current < 0:
            return
        if self.tty:
            now = time.monotonic()
            if current == self._shown_segment and now - self._drawn_s < PROGRESS_REDRAW_S:
                return
            self._drawn_s = now
            self._draw(completed, current)
        elif current != self._shown_segment:
            segment = segments[current]
            self._write(f"dlprof: trial segment {current + 1}/{len(segments)}: {_label(segment)}\n")
        self._shown_segment = current

    def _draw(self, completed: int, current: int) -> None:
        plan = self.plan
        total = max(1, plan.stop_step - plan.trials_start)
        done = min(total, max(0, completed - plan.trials_start))
        filled = round(PROGRESS_WIDTH * done / total)
        bar = "#" * filled + "-" * (PROGRESS_WIDTH - filled)
        segment = plan.segments[current]
        self._write(f"\rdlprof: trials [{bar}] segment {current + 1}/{len(plan.segments)}, {_label(segment)}  ")
        self._open = True

    def close(self) -> None:
        if self._open:
            self._write("\n")
            self._open = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not stop the training
            pass


def _label(segment: PlannedSegment) -> str:
    persistent = ", persistent" if segment.persistent_workers else ""
    if segment.trim_padding:
        return f"num_workers {segment.num_workers}{persistent}, batches trimmed to their longest sequence"
    return f"num_workers {segment.num_workers}{persistent} (round {segment.round + 1})"


class TrialRunner:
    """Runs a plan's segments on the training DataLoader of this process."""

    def __init__(
        self,
        plan: Plan,
        request: TrialRequest,
        record: probe.LoaderRecord,
        step_in_progress: Callable[[], int],
        progress: TrialProgress | None = None,
    ):
        """
        Args:
            record: the training DataLoader (the one that returned the most batches).
            step_in_progress: the step clock's index of the step under way (where a switch lands).
            progress: where to show progress (the first rank only), or None.
        """
        self.plan = plan
        self.request = request
        self.record = record
        self.own = own_setting(record)
        self.step_in_progress = step_in_progress
        self.progress = progress
        self.requested: set[int] = set()
        self.applied: dict[int, _Applied] = {}
        self.failed: str | None = None
        self.notes: list[str] = []
        self.finished = False

    def at_boundary(self, completed: int) -> None:
        """``completed`` steps are done: ask for the switch of every segment due by now (a rank that read the plan late
        asks for the one it is in, and skips the ones it missed)."""
        if self.finished or self.failed is not None:
            return
        due = [i for i, s in enumerate(self.plan.segments) if s.request_step <= completed and i not in self.requested]
        if due:
            for missed in due[:-1]:
                self.requested.add(missed)
                self.notes.append(f"segment {missed + 1} was skipped: this rank read the plan after its steps")
            self._request(due[-1])
        if self.progress is not None:
            self.progress.update(completed)

    def _request(self, index: int) -> None:
        self.requested.add(index)
        segment = self.plan.segments[index]
        if segment.trim_padding:  # the same workers: the main process trims the batches from the next one on
            trim.TRIMMING.add(self.record.loader_id)
            current = switch.Setting(
                segment.num_workers, segment.prefetch_factor, segment.persistent_workers, self.own.timeout_s
            )
            self.applied[index] = _Applied(self.step_in_progress(), switch.SwitchReport(setting=current))
            return
        trim.TRIMMING.discard(self.record.loader_id)
        setting = switch.Setting(
            segment.num_workers, segment.prefetch_factor, segment.persistent_workers, self.own.timeout_s
        )
        switch.request(self.record.loader_id, setting, lambda report: self._switched(index, report))

    def _switched(self, index: int, report: switch.SwitchReport) -> None:
        """The probe switched (in the step under way), or could not."""
        if report.error is not None:
            segment = self.plan.segments[index]
            self.failed = (
                f"switching the DataLoader to num_workers={segment.num_workers} failed ({report.error}); the trials"
                " stopped there"
            )
            self.restore()
            return
        self.applied[index] = _Applied(self.step_in_progress(), report)

    def restore(self) -> None:
        """Give the DataLoader its own settings back for the epochs that follow (a switch still pending is dropped), and
        its batches untrimmed."""
        trim.TRIMMING.discard(self.record.loader_id)
        switch.restore(self.record.loader_id, self.own)

    def finish(self) -> None:
        """The trials are over (every segment ran, or the training ends)."""
        if not self.finished:
            self.finished = True
            self.restore()
            if self.progress is not None:
                self.progress.close()

    def manifest(self, steps_run: int, ended: str | None = None) -> Trials:
        """What ran, for the manifest: every segment that switched, with its steps in the step clock.

        Args:
            steps_run: steps in the step clock.
            ended: why the training ended before the plan did (None: it did not, or dlprof stopped it).
        """
        plan, checked = self.plan, self.record.trim
        order = sorted(self.applied.items(), key=lambda item: item[1].first_step)
        end = min(steps_run, plan.stop_step)
        segments = []
        for k, (index, applied) in enumerate(order):
            planned, report = plan.segments[index], applied.report
            until = order[k + 1][1].first_step if k + 1 < len(order) else end
            segments.append(
                TrialSegment(
                    num_workers=planned.num_workers,
                    persistent_workers=planned.persistent_workers,
                    round=planned.round,
                    first_step=applied.first_step,
                    steps=max(0, until - applied.first_step),
                    drain_ms=report.drain_ms,
                    shutdown_ms=report.shutdown_ms,
                    start_ms=report.start_ms,
                    first_batch_ms=report.first_batch_ms,
                    at_epoch_start=report.at_epoch_start,
                    trim_padding=planned.trim_padding,
                    worker_pids=report.worker_pids,
                )
            )
        incomplete = self.failed or ended
        if incomplete is None and len(segments) < len(plan.segments):
            missing = len(plan.segments) - len(segments)
            incomplete = f"{missing} of the {len(plan.segments)} planned segments never began"
        return Trials(
            counts=self.request.counts,
            rounds=self.request.rounds,
            trial_steps=plan.trial_steps,
            persistent=self.request.persistent,
            loader=self.record.loader_id,
            segments=tuple(segments),
            incomplete=incomplete,
            notes=tuple(self.notes),
            trim_checked=checked.batches,
            trimmable_pct=checked.droppable_pct if checked.positions else None,
            trim_refused=checked.refused,
            max_worker_memory_mib=self.request.max_worker_memory_mib,
        )


def not_run(request: TrialRequest, plan: Plan | None, why: str, loader: int | None = None) -> Trials:
    """The manifest's trials when none ran: what was asked, and why."""
    return Trials(
        counts=request.counts,
        rounds=request.rounds,
        trial_steps=plan.trial_steps if plan is not None else (request.trial_steps or 0),
        persistent=request.persistent,
        loader=loader,
        incomplete=why,
        max_worker_memory_mib=request.max_worker_memory_mib,
    )
