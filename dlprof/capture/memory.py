"""Memory of the training process and its DataLoader workers, sampled from outside them.

Sampling runs in the ``dlprof record`` process, not in the training process, so it takes no GIL
time from training. USS and PSS count copy-on-write pages fairly: a forked worker's RSS includes the
parent's pages it only shares, while its USS grows as Python's reference counting touches (and so
copies) the parent's objects, the copy-on-read effect of a large Python Dataset.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import psutil

#: Sampling period. ~100 ms resolves a worker's start-up and growth over a run of seconds, and one
#: sample of a few processes costs about a millisecond of this process's time.
DEFAULT_INTERVAL_MS = 100


@dataclass(frozen=True)
class MemorySample:
    """One reading of one process."""

    time_ns: int
    pid: int
    uss_bytes: int
    pss_bytes: int
    rss_bytes: int


class MemorySampler:
    """Samples a process and all its descendants every ``interval_ms`` on a daemon thread."""

    def __init__(self, root_pid: int, interval_ms: int = DEFAULT_INTERVAL_MS):
        self.root_pid = root_pid
        self.interval_s = interval_ms / 1000
        self.samples: list[MemorySample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlprof-memory", daemon=True)
        self._processes: dict[int, psutil.Process] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[MemorySample]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def _run(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            self.sample_once(root)
            self._stop.wait(self.interval_s)

    def sample_once(self, root: psutil.Process) -> None:
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        now = time.time_ns()
        for process in processes:
            # Reuse Process objects: psutil checks a pid was not recycled by its creation time.
            known = self._processes.setdefault(process.pid, process)
            try:
                info = known.memory_full_info()
            except psutil.Error:
                continue  # exited between listing and reading
            if info.rss:  # a process that is exiting (or a zombie) reads as all zeros
                self.samples.append(MemorySample(now, known.pid, info.uss, getattr(info, "pss", info.uss), info.rss))
