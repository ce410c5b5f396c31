"""Memory of the training process and its DataLoader workers, sampled from outside them.

Sampling runs in the ``dlprof record`` process, not in the training process, so it takes no GIL
time from training. USS and PSS count copy-on-write pages fairly: a forked worker's RSS includes the
parent's pages it only shares, while its USS grows as Python's reference counting touches (and so
copies) the parent's objects, the copy-on-read effect of a large Python Dataset.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import psutil

from dlprof.results.record import DEFAULT_MEMORY_INTERVAL_MS

#: Most of the time the sampler may spend reading: USS and PSS come from /proc/<pid>/smaps_rollup, which walks a
#: process's page tables under its memory-map lock, slowly enough that frequent readings slow the training, so one
#: process is read at a time (the one read longest ago, a new worker first) and the period grows with the cost of a
#: reading, while a worker's memory changes over seconds (docs/ARCHITECTURE.md#facts-the-code-relies-on).
MAX_DUTY_FRACTION = 0.005


@dataclass(frozen=True, kw_only=True)
class MemoryReading:
    """One reading of one process."""

    time_ns: int
    pid: int
    uss_bytes: int
    pss_bytes: int
    rss_bytes: int


def descendants(pid: int) -> list[int] | None:
    """Every process under ``pid``, from the kernel's list of each thread's children (``/proc/PID/task/TID/children``):
    a fraction of the cost of psutil's scan of every process on the machine, which matters because it is repeated
    every round. None where the kernel keeps no such list."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:  # the process has exited: its children, if any, are someone else's now
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children", encoding="ascii") as f:
                    children = [int(child) for child in f.read().split()]
            except FileNotFoundError:
                if not os.path.exists(f"/proc/{parent}/task/{thread}"):
                    continue  # the thread ended meanwhile
                return None  # a kernel built without CONFIG_PROC_CHILDREN
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


class MemorySampler:
    """Samples a process and all its descendants on a daemon thread, one process per round: every
    ``interval_ms``, or less often when a reading costs more than :data:`MAX_DUTY_FRACTION` of that."""

    def __init__(self, root_pid: int, interval_ms: int = DEFAULT_MEMORY_INTERVAL_MS):
        self.root_pid = root_pid
        self.interval_s = interval_ms / 1000
        self.samples: list[MemoryReading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlprof-memory", daemon=True)
        self._processes: dict[int, psutil.Process] = {}
        self._last_sampled: dict[int, float] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[MemoryReading]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def _run(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            started = time.perf_counter()
            sampled, unread_left = self.sample_once(root)
            cost_s = time.perf_counter() - started
            # One process per round: reading costs the more, the bigger the training's page tables, so
            # the period grows with that cost (MAX_DUTY_FRACTION) and each process gets its turn. A
            # process never read yet (a worker just started) does not wait: it may live one epoch only.
            backoff = sampled and not unread_left
            self._pause(root, max(self.interval_s, cost_s / MAX_DUTY_FRACTION) if backoff else self.interval_s)

    def _pause(self, root: psutil.Process, seconds: float) -> None:
        """Wait ``seconds`` between readings, or until a process never read appears (looked for every interval, from
        the kernel's lists, which are cheap): a slow reading backs off to seconds at :data:`MAX_DUTY_FRACTION`, longer
        than the workers of a short epoch live."""
        left = seconds
        while left > 0:
            step = min(self.interval_s, left)
            if self._stop.wait(step):
                return
            left -= step
            if left > 0 and any(pid not in self._last_sampled for pid in self._pids(root) or ()):
                return

    def _pids(self, root: psutil.Process) -> list[int] | None:
        """``root`` and every process under it; None when they cannot be listed."""
        pids = descendants(root.pid)
        try:
            if pids is None:
                pids = [p.pid for p in root.children(recursive=True)]
        except psutil.Error:
            return None
        return [root.pid, *pids]

    def sample_once(self, root: psutil.Process) -> tuple[bool, bool]:
        """Read the process sampled longest ago (a new one first).

        Returns:
            Whether a process was read, and whether processes never read are left.
        """
        pids = self._pids(root)
        if pids is None:
            return False, False
        pid = min(pids, key=lambda p: self._last_sampled.get(p, 0.0))
        unread_left = sum(1 for p in pids if p not in self._last_sampled) > 1
        self._last_sampled[pid] = time.monotonic()
        now = time.time_ns()
        try:
            # Reuse Process objects: psutil checks a pid was not recycled by its creation time.
            known = self._processes.get(pid)
            if known is None:
                known = self._processes[pid] = psutil.Process(pid)
            info = known.memory_full_info()
        except psutil.Error:
            return False, unread_left  # exited between listing and reading
        if info.rss:  # a process that is exiting (or a zombie) reads as all zeros
            self.samples.append(
                MemoryReading(
                    time_ns=now,
                    pid=known.pid,
                    uss_bytes=info.uss,
                    pss_bytes=getattr(info, "pss", info.uss),
                    rss_bytes=info.rss,
                )
            )
        return True, unread_left
