"""Memory of the training process and its DataLoader workers, sampled from outside them.

Sampling runs in the ``dlprof record`` process, not in the training process, so it takes no GIL
time from training. USS and PSS count copy-on-write pages fairly: a forked worker's RSS includes the
parent's pages it only shares, while its USS grows as Python's reference counting touches (and so
copies) the parent's objects, the copy-on-read effect of a large Python Dataset. Each reading also takes the
process's threads and CPU time from ``/proc/<pid>/stat``, which costs little beside the memory, and every process's
threads are counted between readings too (:data:`THREADS_PERIOD_S`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import psutil

from dlprof.core.manifest import ProcessMemory
from dlprof.results.record import DEFAULT_MEMORY_INTERVAL_MS

#: Most of the time the sampler may spend reading: USS and PSS come from /proc/<pid>/smaps_rollup, which walks a
#: process's page tables under its memory-map lock, slowly enough that frequent readings slow the training, so one
#: process is read at a time (the one read longest ago, a new worker first) and the period grows with the cost of a
#: reading, while a worker's memory changes over seconds (docs/ARCHITECTURE.md#facts-the-code-relies-on).
MAX_DUTY_FRACTION = 0.005
#: Points of a process's USS over time kept in the manifest, at most (evenly chosen): enough to see growth over an
#: epoch, few enough that a long run's manifest stays small.
MAX_SERIES_POINTS = 200

#: Between memory readings, which can be seconds apart, every process's threads are counted this often (one read of
#: /proc/<pid>/stat each, tens of µs): a worker is read first as it starts, before its tokenizer starts a thread pool.
THREADS_PERIOD_S = 1.0

_MIB = 2**20
#: The unit of /proc/<pid>/stat's CPU times.
_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, kw_only=True)
class MemoryReading:
    """One reading of one process."""

    time_ns: int
    pid: int
    uss_bytes: int
    pss_bytes: int
    rss_bytes: int
    #: Its CPU time so far (user + system, s) and the most threads it had since its previous reading (the last reading:
    #: until sampling stopped), from /proc/<pid>/stat; None where unread.
    threads: int | None = None
    cpu_s: float | None = None


def read_stat(pid: int) -> tuple[int, float] | None:
    """A process's threads and CPU time (user + system, s) from one read of ``/proc/<pid>/stat``; None where it cannot
    be read (exited, not Linux)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        return parse_stat(os.read(fd, 4096))
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_stat(text: bytes) -> tuple[int, float] | None:
    """Threads and CPU time (s) from the text of a ``/proc/<pid>/stat``; None where it is not one."""
    # The command name (field 2) may hold spaces and parentheses: field 3 on follow its last ")".
    end_of_name = text.rfind(b")")
    if end_of_name < 0:
        return None
    fields = text[end_of_name + 1 :].split()
    try:  # fields 14 and 15 (utime, stime, in clock ticks) and 20 (num_threads), counted from 1
        return int(fields[17]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S
    except (IndexError, ValueError):
        return None


def evenly(count: int, most: int) -> list[int]:
    """Indices of at most ``most`` of ``count`` points, evenly spread, the first and the last among them."""
    if count <= most:
        return list(range(count))
    if most < 2:
        return list(range(most))
    return [round(i * (count - 1) / (most - 1)) for i in range(most)]


def process_memory(pid: int, role: str, worker_id: int | None, series: Sequence[MemoryReading]) -> ProcessMemory:
    """One process's readings (at least one, in time order) summed up: first, last and peak USS and PSS, its most
    threads, its CPU time from the first reading to the last, and its USS over time (:data:`MAX_SERIES_POINTS`)."""
    uss = [s.uss_bytes / _MIB for s in series]
    pss = [s.pss_bytes / _MIB for s in series]
    cpu = [s.cpu_s for s in series if s.cpu_s is not None]
    threads = [s.threads for s in series if s.threads is not None]
    first_ns = series[0].time_ns
    kept = evenly(len(series), MAX_SERIES_POINTS)
    return ProcessMemory(
        pid=pid,
        role=role,
        worker_id=worker_id,
        samples=len(series),
        duration_s=round((series[-1].time_ns - first_ns) / 1e9, 3),
        uss_mib_first=round(uss[0], 2),
        uss_mib_last=round(uss[-1], 2),
        uss_mib_peak=round(max(uss), 2),
        pss_mib_first=round(pss[0], 2),
        pss_mib_last=round(pss[-1], 2),
        pss_mib_peak=round(max(pss), 2),
        threads_peak=max(threads, default=None),
        # One reading spans no time: its CPU time since the process began is not the sampled span's.
        cpu_s=round(cpu[-1] - cpu[0], 3) if len(cpu) >= 2 else None,
        first_sample_ns=first_ns,
        sample_ms=tuple(round((series[i].time_ns - first_ns) / 1e6, 1) for i in kept),
        uss_mib=tuple(round(uss[i], 2) for i in kept),
    )


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
        # The most threads counted of each process since its last reading, and when they were last counted.
        self._threads_seen: dict[int, int] = {}
        self._threads_counted = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[MemoryReading]:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join()
        last = {s.pid: i for i, s in enumerate(self.samples)}
        for pid, threads in self._threads_seen.items():  # counted after the process's last reading
            i = last.get(pid)
            if i is not None and threads > (self.samples[i].threads or 0):
                self.samples[i] = replace(self.samples[i], threads=threads)
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
            if left > 0:
                pids = self._pids(root) or []
                self.count_threads(pids)
                if any(pid not in self._last_sampled for pid in pids):
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

    def count_threads(self, pids: Sequence[int]) -> None:
        """Count the threads of ``pids``, at most every :data:`THREADS_PERIOD_S`, keeping each one's most."""
        now = time.monotonic()
        if now - self._threads_counted < THREADS_PERIOD_S:
            return
        self._threads_counted = now
        for pid in pids:
            stat = read_stat(pid)
            if stat is not None and stat[0] > self._threads_seen.get(pid, 0):
                self._threads_seen[pid] = stat[0]

    def sample_once(self, root: psutil.Process) -> tuple[bool, bool]:
        """Read the process sampled longest ago (a new one first).

        Returns:
            Whether a process was read, and whether processes never read are left.
        """
        pids = self._pids(root)
        if pids is None:
            return False, False
        self.count_threads(pids)
        pid = min(pids, key=lambda p: self._last_sampled.get(p, 0.0))
        unread_left = sum(1 for p in pids if p not in self._last_sampled) > 1
        self._last_sampled[pid] = time.monotonic()
        now = time.time_ns()
        stat = read_stat(pid)
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
                    threads=max(stat[0], self._threads_seen.pop(pid, 0)) if stat is not None else None,
                    cpu_s=stat[1] if stat is not None else None,
                )
            )
        return True, unread_left
