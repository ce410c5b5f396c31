"""``DlprofCallback``'s trials (``try_workers=``): their arguments checked as the callback's, and, under a launcher,
every rank's callback recording into rank 0's run directory, so that every rank follows rank 0's plan.

With trials, every rank records (without them the callback records rank 0 only): rank 0's callback prepares the run
directory and its scratch folder as ``dlprof record`` would; the others join it (:func:`join_rank0`) and record their
own process there, as a launcher's ranks do under ``dlprof record``. The trials' machinery is the recorder's: rank 0
decides and publishes the plan, the switches and the choice, every rank reads them at its step boundaries. At the
end every rank writes its recording into the scratch folder, and rank 0 waits for them (:func:`wait_for_ranks`)
before it merges the run's traces.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path

from dlprof.capture import finalize
from dlprof.capture.session import CONFIG_FILE
from dlprof.capture.trial_plan import check_request, parse_counts, read_json
from dlprof.core import schema
from dlprof.core.errors import DlprofError, UsageError
from dlprof.results.record import THEN_MODES, THEN_STOP, TrialRequest

#: How long a rank waits for rank 0's callback to open the recording, and rank 0 at the end for every rank's, s.
JOIN_TIMEOUT_S = 120.0
RESULTS_TIMEOUT_S = 120.0
_POLL_S = 0.2


def as_arguments(error: UsageError) -> UsageError:
    """A command-line option's error said as the callback's arguments (``--try-workers 'x'`` as ``try_workers='x'``)."""
    said = re.sub(r"--([\w-]+) ", lambda m: m.group(1).replace("-", "_") + "=", str(error))
    return UsageError("DlprofCallback: " + re.sub(r"--([\w-]+)", lambda m: m.group(1).replace("-", "_"), said))


def trial_request(
    try_workers: str | Sequence[int] | None, trial_steps: int | None, trial_rounds: int, then: str, stops: bool
) -> TrialRequest | None:
    """The trials the callback's arguments ask for (None: none); raises UsageError for ones that cannot run."""
    if then not in THEN_MODES:
        raise UsageError(f"DlprofCallback: then={then!r}: give one of {', '.join(map(repr, THEN_MODES))}")
    if try_workers is None:
        if then != THEN_STOP:
            raise UsageError(f"DlprofCallback: then={then!r} trains on after trials: give try_workers=[0, 2, 4] too")
        return None
    if stops:
        raise UsageError(
            "DlprofCallback: stop_after_window=True with try_workers: the trials run after the window's reference"
            " steps; drop stop_after_window (then='stop', the default, stops training once the trials are done)"
        )
    text = try_workers if isinstance(try_workers, str) else ",".join(str(count) for count in try_workers)
    try:
        request = TrialRequest(counts=parse_counts(text), rounds=trial_rounds, trial_steps=trial_steps, then=then)
        check_request(request, run_to_end=False)
    except UsageError as error:
        raise as_arguments(error) from None
    return request


def join_rank0(out_dir: Path, name: str, rank: int, timeout_s: float = JOIN_TIMEOUT_S) -> tuple[Path, Path, dict]:
    """A rank other than 0: the run directory rank 0's callback opened, its scratch folder and session config, once
    they are there (a scratch folder whose owner is gone is a failed run's, not this one's).

    Raises:
        UsageError: rank 0 opened none in ``timeout_s``.
    """
    run_dir = out_dir / name
    scratch = run_dir / schema.SCRATCH_DIR
    deadline = time.monotonic() + timeout_s
    while True:
        owner = schema.read_scratch_owner(scratch)
        config = read_json(scratch / CONFIG_FILE) if owner is not None and owner.alive else None
        if config is not None:  # None: not written yet, or being written
            return run_dir, scratch, config
        if time.monotonic() >= deadline:
            raise UsageError(
                f"DlprofCallback: rank {rank}: rank 0 opened no recording in {run_dir} within {timeout_s:.0f} s;"
                " create the callback on every rank, with the same out_dir and name"
            )
        time.sleep(_POLL_S)


def wait_for_ranks(scratch: Path, world_size: int, timeout_s: float = RESULTS_TIMEOUT_S) -> int:
    """Rank 0 at the end: wait until every rank has written its final recording (not the provisional one of the
    trials' end), or ``timeout_s`` passed; returns how many have (the merge notes the ranks missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            final = {result.rank for result in finalize.read_results(scratch) if not result.provisional}
        except DlprofError:  # a file being replaced
            final = set()
        if len(final) >= world_size or time.monotonic() >= deadline:
            return len(final)
        time.sleep(_POLL_S)
