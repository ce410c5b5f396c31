"""The trials' traces while the training goes on (``--then best|keep``), in ``dlprof record``'s own process.

While the command runs, :class:`TrialsWatcher` looks into the session directory about once a second. When every rank
has marked its trials over (:func:`dlprof.capture.tuned.ranks_done`), it merges their recordings so far into the
run's traces (status ``training``), hands them to the caller's ``choose`` (``dlprof record``'s workflow: analyse,
say what was chosen, return the setting) and writes the choice for the deciding rank
(:data:`dlprof.capture.tuned.CHOICE_FILE`). Nothing here may stop the recording: a failure becomes the choice's
error, and the training goes on at the setting it has.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from dlprof.capture import finalize, merge, trial_plan, tuned
from dlprof.capture.memory import MemoryReading
from dlprof.core.errors import DlprofError
from dlprof.results.record import RankResult, RecordResult

#: Seconds between two looks into the session directory (a listing each).
LOOK_EVERY_S = 1.0

#: Turns the trials' traces into the choice: a :func:`dlprof.capture.tuned.choice_document`.
Choose = Callable[[RecordResult], dict]


class TrialsWatcher:
    """Writes the trials' traces once every rank's trials are over, and the setting chosen from them."""

    def __init__(
        self,
        run_dir: Path,
        session_dir: Path,
        inputs: Callable[[list[MemoryReading]], merge.MergeInputs],
        multi_node: bool,
        choose: Choose,
    ):
        """
        Args:
            session_dir: where the ranks mark their trials over.
            inputs: the merge's inputs, given the memory samples so far.
            multi_node: this record is one node of a job over several machines: its own ranks are waited for.
            choose: the setting to train on, from the trials' traces.
        """
        self.run_dir = run_dir
        self.session_dir = session_dir
        self.inputs = inputs
        self.multi_node = multi_node
        self.choose = choose
        #: The traces written (the final ones replace them), and whether the watch is over.
        self.written: tuple[Path, ...] = ()
        self.done = False
        self._looked_s = 0.0

    def tick(self, samples: list[MemoryReading]) -> None:
        """Called while the command runs (with the sampler's growing list of samples); returns at once until the trials
        end."""
        now = time.monotonic()
        if self.done or now - self._looked_s < LOOK_EVERY_S:
            return
        self._looked_s = now
        done = tuned.ranks_done(self.session_dir)
        if not done:
            return
        try:
            results = finalize.read_results(self.session_dir)
        except DlprofError:
            results = []
        if not results or done < (results[0].local_world_size if self.multi_node else results[0].world_size):
            return
        self.done = True
        inputs = self.inputs(list(samples))
        try:
            document = self._choice(inputs, results)
        except Exception as error:  # never into the recording: the training goes on at the setting it has
            document = tuned.choice_document(None, f"dlprof could not choose ({type(error).__name__}: {error})")
        try:
            trial_plan.write_json(self.session_dir / tuned.CHOICE_FILE, document)
        except OSError as error:
            print(f"dlprof: could not hand the chosen setting to the training ({error.strerror})", file=sys.stderr)

    def _choice(self, inputs: merge.MergeInputs, results: list[RankResult]) -> dict:
        try:
            written = finalize.write_interim(self.run_dir, inputs, results)
        except (OSError, orjson.JSONDecodeError, DlprofError) as error:
            why = getattr(error, "strerror", None) or str(error)
            print(f"dlprof: could not write the trials' traces ({why}); the training goes on", file=sys.stderr)
            return tuned.choice_document(None, f"the trials' traces could not be written ({why})")
        self.written = written.trace_paths
        return self.choose(written)
