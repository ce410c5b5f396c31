"""``dlprof record --plain-launch``: the recorded command launched again without the profiler, its steps timed.

A recording runs its reference steps in a process that has just been profiled, beside DataLoader workers that write
spans: the steps after the window can run slower (or faster) than the same training launched on its own. The plain
launch measures by how much. Once the recording's traces are written, ``dlprof record`` runs the same command again
in a session that only times steps (``plain_clock.PlainClock``: one global optimizer post-hook, no profiler, no
spans, no DataLoader instrumentation) and stops it after the recording's last reference step. The steps' times go
into the run directory (:func:`dlprof.core.schema.plain_launch_path`), where ``dlprof analyze`` compares them with
the recording's own over the same steps (:func:`dlprof.analysis.unprofiled.plain_launch_stats`).

A step is what it is in the recording: from one step of the training's first optimizer to the next. Single-process
trainings only: the trace's ranks are not the launch's processes otherwise.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from dlprof.capture.plain_clock import CONFIG_KEY, STEPS_FILE_PREFIX
from dlprof.capture.session import CONFIG_FILE
from dlprof.capture.trial_plan import write_json
from dlprof.core import schema
from dlprof.core.manifest import PHASE_AFTER
from dlprof.results.record import PlainLaunch, RecordResult

#: The plain launch's memory sampler only watches for leftover processes: one reading a minute costs nothing.
SAMPLE_INTERVAL_MS = 60_000


def stop_step(result: RecordResult) -> int | None:
    """The recording's last reference step (1-based, as the step clock numbers steps); None without one."""
    clock = result.manifests[0].step_clock if result.manifests else None
    after = [i for i, phase in enumerate(clock.phase) if phase == PHASE_AFTER] if clock is not None else []
    return after[-1] + 1 if after else None


def why_not(result: RecordResult) -> str | None:
    """Why the recording gets no plain launch (None: it does)."""
    if len(result.trace_paths) != 1:
        return f"the recording has {len(result.trace_paths)} ranks; plain launches are timed for one process only"
    manifest = result.manifests[0] if result.manifests else None
    if manifest is None or manifest.schedule is None or manifest.schedule.step_mode != "optimizer":
        return "the recording's steps were not optimizer steps, which are all a plain launch can time"
    if stop_step(result) is None:
        return "the recording timed no reference step after its window"
    return None


def plain_launch(argv: list[str], result: RecordResult) -> tuple[str, int | None]:
    """Launch the recorded command again without the profiler, time it up to the recording's last reference step and
    write its steps into the run directory; returns the line that says what happened, and the signal (SIGINT,
    SIGTERM) that stopped it, if one did. The recording is written already: nothing here touches it."""
    from dlprof.capture import child

    why = why_not(result)
    if why is not None:
        return f"dlprof: no plain launch: {why}", None
    last = stop_step(result)
    assert last is not None  # why_not checked it
    said = f"dlprof: launching the command again without the profiler, to time its first {last} steps"
    print(said, file=sys.stderr, flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="dlprof-plain-"))
    try:
        (scratch / CONFIG_FILE).write_text(json.dumps({CONFIG_KEY: {"stop_step": last}}))
        exit_code, _, stopped_by = child.run_child(argv, child.child_env(scratch), SAMPLE_INTERVAL_MS, scratch)
        if stopped_by is not None:
            return "dlprof: the plain launch was stopped; the recording is complete without it", stopped_by
        steps = _timed_steps(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not steps:
        return f"dlprof: the plain launch timed no step (it exited with code {exit_code}); nothing to compare", None
    trace = result.trace_paths[0]
    launch = PlainLaunch(trace=trace.name, step_ms=tuple(steps), stop_step=last, exit_code=exit_code)
    path = schema.plain_launch_path(trace)
    try:
        path.parent.mkdir(exist_ok=True)
        write_json(path, {"schema": schema.PLAIN_LAUNCH_SCHEMA, **asdict(launch)})
    except OSError as error:
        return f"dlprof: could not write the plain launch's steps to {path} ({error}); the recording is complete", None
    ended = f", exit code {exit_code}" if exit_code else ""
    short = f" (the training ended after {len(steps)}{ended})" if len(steps) < last else ""
    return f"dlprof: the plain launch timed {min(len(steps), last)} steps{short}: {path}", None


def _timed_steps(scratch: Path) -> list[float]:
    """The steps of the process that timed the most (the training's; none where none wrote)."""
    best: list[float] = []
    for path in scratch.glob(f"{STEPS_FILE_PREFIX}*.json"):
        try:
            steps = json.loads(path.read_text()).get("step_ms", [])
        except (OSError, ValueError, AttributeError) as error:
            print(f"dlprof: the plain launch's {path.name} is unreadable ({error}); left out", file=sys.stderr)
            continue
        if isinstance(steps, list) and len(steps) > len(best):
            best = [float(s) for s in steps if isinstance(s, int | float)]
    return best
