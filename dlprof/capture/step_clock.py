"""The step clock: every training step, profiled or not, timed with clocks cheap enough to read at each boundary.

Each step is one :class:`StepRow`; the manifest stores them as columns (:func:`columns`). The recorder reads the
reference steps back from the rows (:func:`steady_reference`) to decide when their speed is known, and forks once
after the window in a run without workers (:class:`ForkProbe`) so that the rows show what starting workers costs.
The profiler's lifecycle around them is :mod:`dlprof.capture.recorder`'s.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from dlprof.capture import probe
from dlprof.core import manifest, throughput
from dlprof.core.manifest import StepClock

#: In a run without workers, the after-window step at which the training process forks once (the fork probe).
FORK_PROBE_AFTER_STEP = 2
#: How long the probe's child lives: longer than the settling steps, as a worker would.
FORK_PROBE_CHILD_S = 2.0


class StepRow(NamedTuple):
    """One step of the step clock (ns where timed)."""

    #: ``manifest.PHASE_*``: before, inside or after the profiled window, or in a trial.
    phase: str
    wall_ns: int
    #: The main process's CPU time (all its threads).
    cpu_ns: int
    #: The training thread's wait for a core.
    runq_ns: int
    #: Time in the DataLoader's ``__next__`` and epoch starts.
    wait_ns: int
    batches: int
    epoch_start: bool
    #: The fork probe's child was started at the step before.
    fork_probe: bool
    #: The batches already made when the step's first batch was asked for; -1 unknown.
    ready: int
    #: The main process's minor page faults.
    faults: int
    #: The main process's kernel CPU time.
    sys_ns: int
    #: The CPU time the main process's other threads took while the training thread waited for data.
    wait_others_cpu_ns: int
    #: The training thread's own CPU time (the rest of ``cpu_ns`` is its other threads': intra-op, pin-memory).
    thread_cpu_ns: int


def read_clocks(runq_clock: Callable[[], int]) -> tuple[int, int, int, int, int, int, int]:
    """Wall, process CPU and run-queue ns, then minor page faults, kernel CPU ns, the CPU ns the other threads
    took in the data waits so far (:func:`probe.others_cpu_in_waits_ns`) and the training thread's CPU ns; cheap
    enough for every step.

    The page faults tell how glibc's malloc serves the training: in CPU training it may map and unmap the step's
    mid-sized tensors, thousands of faults per step at a level each process settles on by chance (and a profiler
    window's freed buffers can lower it), which moves the step's speed (see docs/ARCHITECTURE.md's facts)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (
        time.time_ns(),
        time.process_time_ns(),
        runq_clock(),
        usage.ru_minflt,
        round(usage.ru_stime * 1e9),
        probe.others_cpu_in_waits_ns(),
        time.thread_time_ns(),
    )


def columns(rows: Sequence[StepRow]) -> StepClock:
    """Every step seen, in ms (a step is never shorter than 0, whatever the wall clock did meanwhile)."""
    ms = lambda ns: round(max(0, ns) / 1e6, 4)
    return StepClock(
        phase=tuple(r.phase for r in rows),
        wall_ms=tuple(ms(r.wall_ns) for r in rows),
        cpu_ms=tuple(ms(r.cpu_ns) for r in rows),
        runq_ms=tuple(ms(r.runq_ns) for r in rows),
        wait_ms=tuple(ms(r.wait_ns) for r in rows),
        batches=tuple(r.batches for r in rows),
        epoch_start=tuple(r.epoch_start for r in rows),
        fork_probe=tuple(r.fork_probe for r in rows),
        ready=tuple(r.ready for r in rows),
        faults=tuple(max(0, r.faults) for r in rows),
        sys_ms=tuple(ms(r.sys_ns) for r in rows),
        wait_others_cpu_ms=tuple(ms(r.wait_others_cpu_ns) for r in rows),
        thread_cpu_ms=tuple(ms(r.thread_cpu_ns) for r in rows),
    )


def epoch_starts(rows: Sequence[StepRow]) -> list[int]:
    """The indices of the steps at which an epoch started."""
    return [i for i, row in enumerate(rows) if row.epoch_start]


def steady_reference(
    rows: Sequence[StepRow], training: probe.LoaderRecord | None, batches_per_step: float
) -> tuple[list[float], list[float]]:
    """The steady reference steps so far, their wall and data-wait ms: the refill transient after the export left
    out, and the steps settling after an epoch start or the fork probe (their excess is a restart's cost, not the
    speed)."""
    after = [row for row in rows if row.phase == manifest.PHASE_AFTER]
    wall_ms = [row.wall_ns / 1e6 for row in after]
    wait_ms = [row.wait_ns / 1e6 for row in after]
    transient = 0
    if training is not None and after:
        config = training.config
        queue = throughput.queue_steps(config.get("num_workers"), config.get("prefetch_factor"), batches_per_step)
        transient = throughput.transient_steps(wall_ms, wait_ms, queue, config.get("num_workers") or 1)
    settling: set[int] = set()
    for i, row in enumerate(after):
        if row.epoch_start or row.fork_probe:
            settling.update(range(i, i + manifest.EPOCH_SETTLE_STEPS))
    steady = [i for i in range(len(after)) if i >= transient and i not in settling]
    return [wall_ms[i] for i in steady], [wait_ms[i] for i in steady]


def _fork_holding_interrupts() -> tuple[int, bool]:
    """``os.fork()``, holding a Ctrl-C that arrives meanwhile: the child's pid (0 in the child), and whether one came.

    A fork runs the at-fork callbacks (logging's, torch's) in Python; a SIGINT handled inside one raises its
    KeyboardInterrupt there, where it is printed ("Exception ignored in ...") and dropped, and the training would go
    on as if the user had not pressed Ctrl-C. The caller raises it again once the child is accounted for.
    """
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or threading.current_thread() is not threading.main_thread():
        return os.fork(), False  # a handler not set from Python cannot be put back; off the main thread none can be set
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        child = os.fork()
    finally:
        signal.signal(signal.SIGINT, previous)
    return child, bool(held)


class ForkProbe:
    """Fork once after the window in a run without workers: what starting forked workers costs training.

    Forking marks the training process's memory copy-on-write: for a few steps after, each page it
    writes is copied. Starting DataLoader workers does that at every epoch, which a num_workers=0 run
    cannot show; a child that lives on like a worker (then exits without running anything) can.
    """

    def __init__(self) -> None:
        self.probed = False
        self.pid: int | None = None

    def maybe_fork(self, steps_after_window: int, training_loader: Callable[[], probe.LoaderRecord | None]) -> bool:
        """Fork now if this is the step to (``training_loader``: the training DataLoader, asked only then)."""
        if self.probed or steps_after_window != FORK_PROBE_AFTER_STEP or not hasattr(os, "fork"):
            return False
        training = training_loader()
        if (
            training is None
            or training.config.get("num_workers")
            or multiprocessing.get_start_method(allow_none=True) not in (None, "fork")
        ):
            return False
        if "fork" not in multiprocessing.get_all_start_methods():
            return False
        self.probed = True
        child, interrupted = _fork_holding_interrupts()
        if child == 0:  # the child: live as long as the settling steps take, then leave without a trace
            try:
                time.sleep(FORK_PROBE_CHILD_S)
            finally:
                os._exit(0)
        self.pid = child  # known before the Ctrl-C goes on: reap() must find it
        if interrupted:
            signal.raise_signal(signal.SIGINT)
        return True

    def reap(self) -> None:
        """Collect the probe's child: no zombie is left behind, whenever training ends."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
        self.pid = None
