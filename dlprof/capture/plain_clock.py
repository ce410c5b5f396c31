"""The step timer of a plain launch (``dlprof record --plain-launch``, :mod:`dlprof.capture.plain`): what the session
of the launched command runs instead of the probe and the recorder. It imports the standard library only (the session
loads it in every Python process it arms), and dlprof's atomic write only when it writes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

#: The session config's key that makes a session only time steps: ``{"stop_step": N}``.
CONFIG_KEY = "plain_launch"
#: In the session directory: the steps a plain launch's training process timed, ``plain-steps-<pid>.json``.
STEPS_FILE_PREFIX = "plain-steps-"


class PlainClock:
    """Times the steps of the training's first optimizer in a plain launch, and stops the training after
    ``stop_step`` steps (a SystemExit with code 0 at the step boundary, as the recorder stops it)."""

    def __init__(self, session_dir: Path, stop_step: int):
        self.session_dir, self.stop_step = session_dir, stop_step
        self._optimizer_id: int | None = None
        self._boundaries_ns: list[int] = []
        self.written = False

    def on_optimizer_step(self, optimizer: Any) -> None:
        """An optimizer stepped (a global post-hook): the first to step marks the steps; the first boundary starts
        the clock, as the recorder's first step begins there."""
        if self._optimizer_id is None:
            self._optimizer_id = id(optimizer)
        elif id(optimizer) != self._optimizer_id:
            return
        self._boundaries_ns.append(time.perf_counter_ns())
        if len(self._boundaries_ns) > self.stop_step:
            self.write()
            raise SystemExit(0)

    def write(self) -> None:
        """Write the steps timed so far (once; nothing where the process stepped no optimizer)."""
        if self.written or len(self._boundaries_ns) < 2:
            return
        self.written = True
        from dlprof.capture.trial_plan import write_json  # here, not at start-up: every armed process loads this

        ns = self._boundaries_ns
        steps = [(b - a) / 1e6 for a, b in zip(ns, ns[1:], strict=False)]
        path = self.session_dir / f"{STEPS_FILE_PREFIX}{os.getpid()}.json"
        try:
            write_json(path, {"step_ms": steps})
        except OSError as error:  # a full disk: dlprof record says the launch timed nothing; no traceback in training
            print(f"dlprof: could not save the plain launch's steps ({path}: {error.strerror})", file=sys.stderr)
