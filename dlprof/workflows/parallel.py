"""One task per trace file: in this process (``--processes 1``), in worker processes (``--processes N``) or on
Ray (``--ray``).

A task gets a path and hands back a small summary: traces are read where they lie and never travel between
processes. Results come back in the order of the calls, whichever finished first, so that what is built from
them is the same however many processes ran them.

Each call gets a worker process of its own, which ends with it: a process that reads one trace after another
keeps some of each (fragments of its heap), one that reads one trace peaks at that trace's cost. A caller that runs
one thread (the ``dlprof analyze`` command) forks its workers itself (``fork``), because there is nothing to start
first and that is faster than a fork server (docs/ARCHITECTURE.md#facts-the-code-relies-on). A caller with other
threads (one that imported and ran torch: a notebook, ``dlprof sweep``) would copy them half-way, locks held, into a
plain ``fork``: its workers are forked from a fork server (``forkserver``), which imports the task's module once and
then starts each cheaply. A server that something else ended is started again, and when no
worker starts at all the calls left run in this process. Progress needs no thread of its own there: the loop that
waits for results says it. Ray is imported only for ``--ray``, whose tasks run in Ray's own worker processes.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from dlprof.core.errors import DlprofError, UsageError, printable

#: A worker's peak memory per byte of trace JSON (the file's buffer, then the events kept), at the top of what was
#: measured so that a budget errs safe (docs/ARCHITECTURE.md#facts-the-code-relies-on).
PEAK_PER_JSON_BYTE = 1.6
#: A worker's memory before it reads a trace (Python and dlprof's analyze path), with room.
WORKER_BASE_BYTES = 40 << 20
#: Progress on stderr only for work that takes longer than this.
PROGRESS_AFTER_S = 2.0
#: What ``--ray`` says when Ray is not installed.
RAY_MISSING = '--ray: Ray is not installed; install dlprof\'s Ray extra: pip install "dlprof[ray]"'
#: What ``dlprof``'s entry points (``python -m dlprof``, the ``dlprof`` script) import: each worker runs its parent's
#: ``__main__`` again (as multiprocessing does), which then finds it imported instead of importing it once more.
ENTRY_POINT = ("dlprof.cli",)
#: glibc's ``mallopt`` parameter number of the mmap threshold.
M_MMAP_THRESHOLD = -3
#: ``--ray local``: the object store holds only the summaries (Ray's floor is 75 MB).
LOCAL_OBJECT_STORE_BYTES = 100 << 20


def json_bytes(path: Path) -> int:
    """The size of a trace's JSON, which a worker's memory follows: a gzip file's own record of it (its last four
    bytes, the size modulo 4 GiB), at least the compressed size; a plain file's size. 0 when it cannot be read."""
    try:
        size = path.stat().st_size
        if path.name.endswith(".gz") and size >= 4:
            with path.open("rb") as f:
                f.seek(-4, os.SEEK_END)
                return max(size, int.from_bytes(f.read(4), "little"))
        return size
    except OSError:
        return 0


def available_memory() -> int | None:
    """Bytes of memory available to new processes (``MemAvailable`` of /proc/meminfo); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as taskset or a container's cpuset set it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_processes(sizes: Sequence[int], cores: int | None = None, memory: int | None = None) -> int:
    """``--processes``'s default: the usable cores, as many as fit in the available memory with the biggest trace in
    each (``processes x (WORKER_BASE_BYTES + PEAK_PER_JSON_BYTE x biggest) <= MemAvailable``), at most one per task."""
    cores = usable_cores() if cores is None else cores
    memory = available_memory() if memory is None else memory
    processes = min(cores, max(1, len(sizes)))
    if memory is not None and sizes:
        per_process = WORKER_BASE_BYTES + PEAK_PER_JSON_BYTE * max(sizes)
        processes = min(processes, int(memory // per_process))
    return max(1, processes)


class Counter:
    """``dlprof: analyzed k/n ranks`` on stderr, once the work has taken :data:`PROGRESS_AFTER_S`, and only then.

    On a terminal the line is rewritten in place; elsewhere (a log file) a line at most every couple of seconds
    and the last. stdout, where reports go, is never touched.
    """

    def __init__(self, total: int, what: str = "ranks", after_s: float | None = None) -> None:
        self._total, self._what, self._done = total, what, 0
        self._after_s = PROGRESS_AFTER_S if after_s is None else after_s
        self._start = self._last = time.perf_counter()
        self._lock = threading.Lock()
        self._shown = False
        self._tty = sys.stderr.isatty()
        self._timer = threading.Timer(self._after_s, self._show)
        self._timer.daemon = True

    def start(self, *, timer: bool = True) -> None:
        """The work begins (a cluster joined): the clock starts. ``timer``: a thread says the first line when it is
        due; without it, the caller's :meth:`poll` does (a process that forks must not hold other threads)."""
        self._start = self._last = time.perf_counter()
        if timer:
            self._timer.start()

    def due_in(self) -> float | None:
        """Seconds until :meth:`poll` has a first line to say; None once it has said it."""
        return None if self._shown else max(0.0, self._start + self._after_s - time.perf_counter())

    def poll(self) -> None:
        """Say the first line if it is due (the work has taken ``after_s``)."""
        if not self._shown and time.perf_counter() - self._start >= self._after_s:
            self._show()

    def _line(self) -> str:
        return f"dlprof: analyzed {self._done}/{self._total} {self._what}"

    def _show(self) -> None:
        with self._lock:
            if self._done < self._total:
                self._print()

    def _print(self) -> None:
        self._shown = True
        self._last = time.perf_counter()
        print(f"\r{self._line()}" if self._tty else self._line(), end="" if self._tty else "\n", file=sys.stderr)
        sys.stderr.flush()

    def step(self) -> None:
        """One task done."""
        with self._lock:
            self._done += 1
            now = time.perf_counter()
            if self._shown and (self._tty or self._done == self._total or now - self._last >= PROGRESS_AFTER_S):
                self._print()

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._shown and self._tty:
                print(f" in {time.perf_counter() - self._start:.1f} s", file=sys.stderr, flush=True)
            self._shown = False


def run_tasks(
    task: Callable,
    calls: Sequence[tuple],
    *,
    processes: int,
    ray: str | None = None,
    sizes: Sequence[int] = (),
    what: str = "ranks",
) -> list:
    """``task(*call)`` for every call, in order: with ``processes`` 1 (or one call) in this process, one after another;
    else each in a worker process of its own, ``processes`` at a time; or on Ray (``ray``: ``auto``, ``local`` or a
    cluster's address). ``sizes`` (bytes each call reads) start the biggest first.

    Worker processes run this process's ``__main__`` module again, as multiprocessing's do: a script that asks for
    ``processes`` > 1 must keep its own work under ``if __name__ == "__main__":``.

    ``task`` must be a module-level function; its calls and results are pickled.

    Raises:
        UsageError: ``--ray`` without Ray installed, or no cluster at that address.
        DlprofError: a worker process died (out of memory, killed).
    """
    order = sorted(range(len(calls)), key=lambda i: -sizes[i] if i < len(sizes) else 0)
    counter = Counter(len(calls), what) if len(calls) > 1 else None
    try:
        if ray is not None:
            return _on_ray(task, calls, order, ray, processes, counter)
        if processes <= 1 or len(calls) == 1:
            if counter:
                counter.start()
            results = []
            for call in calls:
                results.append(task(*call))
                if counter:
                    counter.step()
            return results
        return _in_processes(task, calls, order, min(processes, len(calls)), counter)
    finally:
        if counter:
            counter.close()


def _in_processes(task: Callable, calls: Sequence[tuple], order: list[int], processes: int, counter: Counter | None):
    """Each call in a process of its own, ``processes`` at a time: a process's memory is then one trace's, however many
    ranks there are (a process that reads one trace after another keeps some of each), and a process that dies
    takes only its own call with it. When no worker
    process can be started, the calls left run in this process (said on stderr): the results are the same."""
    context = _worker_context(task)
    if counter:
        counter.start(timer=False)
    results: list = [None] * len(calls)
    todo = list(order)
    running: dict = {}
    startable = True
    try:
        while todo or running:
            while startable and todo and len(running) < processes:
                started = _start(context, task, calls[todo[0]])
                startable = started is not None
                if started:
                    running[started[0]] = (started[1], todo.pop(0))
            if not running:  # no worker process could be started: the calls left run below
                break
            ready = multiprocessing.connection.wait(list(running), timeout=counter.due_in() if counter else None)
            if counter:
                counter.poll()
            for receiver in ready:
                process, index = running.pop(receiver)
                results[index] = _received(receiver, process, calls[index], processes)
                if counter:
                    counter.step()
    finally:
        for receiver, (process, _) in running.items():
            process.kill()
            process.join()
            receiver.close()
    for index in todo:
        results[index] = task(*calls[index])
        if counter:
            counter.step()
    return results


def only_thread() -> bool:
    """Whether this process runs one thread (its tasks in /proc; False where that cannot be read)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _worker_context(task: Callable):
    """How workers start: forked from this process when it runs no other thread, else from the fork server."""
    if only_thread() and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    # Imported once, in the server, which every worker is forked from.
    context.set_forkserver_preload([task.__module__, *ENTRY_POINT])
    _forget_forkserver(only_if_gone=True)
    return context


def _start(context, task: Callable, call: tuple):
    """A worker process for ``task(*call)``, and the end of the pipe its result comes back on; None when none can be
    started (said once on stderr).

    The fork server is multiprocessing's, one per process and kept for its life. Something else may have ended it:
    ``dlprof record`` run in the same process (a notebook, the tests) ends the processes it leaves behind, and a
    user may kill it. multiprocessing then fails to start a worker (``ChildProcessError`` once the server was
    reaped by another, a refused connection, a closed pipe), instead of starting a new server; so the server is
    forgotten and the start tried again once.
    """
    for attempt in (1, 2):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=_worker, args=(sender, task, call), daemon=True)
        try:
            process.start()
        except (OSError, EOFError) as error:  # ChildProcessError and ConnectionError are OSErrors
            receiver.close()
            sender.close()
            if attempt == 1:
                _forget_forkserver(only_if_gone=False)
                continue
            print(
                f"dlprof: no worker process could be started ({printable(str(error)) or type(error).__name__});"
                " analysing in this process instead",
                file=sys.stderr,
                flush=True,
            )
            return None
        sender.close()
        return receiver, process
    return None


def _forget_forkserver(*, only_if_gone: bool) -> None:
    """Make multiprocessing start a new fork server at the next worker: always, or ``only_if_gone`` when its server
    has exited, or was reaped by another (which multiprocessing, asking ``waitpid`` whether it runs, takes for an
    error). multiprocessing has no public call for this: its server's state is reset here, where it is known."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if server is None or pid is None:
        return
    try:
        gone = os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        gone = True
    if only_if_gone and not gone:
        return
    with server._lock:
        try:
            os.close(server._forkserver_alive_fd)  # a server still running exits when this closes
        except (OSError, TypeError):
            pass
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None


def _worker(sender, task: Callable, call: tuple) -> None:
    """A worker process: ``task(*call)``, sent back; an unexpected exception as its traceback's text."""
    fixed_mmap_threshold()
    try:
        result = (True, task(*call))
    except BaseException:  # anything, to the caller, which raises it
        result = (False, traceback.format_exc())
    sender.send(result)
    sender.close()


def _received(receiver, process, call: tuple, processes: int):
    try:
        ok, result = receiver.recv()
    except EOFError:
        process.join()
        what = printable(str(call[0])) if call else "a task"
        raise DlprofError(
            f"{what}: its worker process died (exit code {process.exitcode}; out of memory?); run again with fewer"
            f" --processes than {processes}"
        ) from None
    finally:
        receiver.close()
    process.join()
    if not ok:
        raise RuntimeError(f"a worker process failed:\n{result}")
    return result


def fixed_mmap_threshold() -> None:
    """glibc's malloc gives big blocks their own mapping only above a threshold that it raises to the size of each one
    freed: a second trace's buffer then grows in the heap, copied as it grows, and peaks higher than the first.
    Fixed at 1 MiB, every buffer goes back to the system when freed. For processes that read traces: dlprof's
    workers, and ``dlprof analyze``'s own."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 20)
    except (OSError, AttributeError):  # not glibc
        pass


def _connect(ray_module, address: str, processes: int) -> bool:
    """Join (or, for ``local``, start) a Ray cluster; False when this process was already connected."""
    if ray_module.is_initialized():
        return False
    if not address.strip():
        raise UsageError("--ray: give 'auto' (the cluster in RAY_ADDRESS), 'local' or a cluster's address")
    unreachable = _unreachable(os.environ.get("RAY_ADDRESS", "") if address == "auto" else address)
    if unreachable:
        raise UsageError(
            f"--ray {address}: cannot reach {unreachable}; check the address (and RAY_ADDRESS), or use --ray local"
        )
    quiet = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    try:
        if address == "local":
            ray_module.init(address="local", num_cpus=processes, object_store_memory=LOCAL_OBJECT_STORE_BYTES, **quiet)
        else:  # "auto": the cluster in RAY_ADDRESS (or the one started on this machine by 'ray start')
            ray_module.init(address=address, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as error:
        where = "in RAY_ADDRESS" if address == "auto" else "at that address"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"--ray {address}: no Ray cluster {where} ({first}); start one with 'ray start --head', give its address,"
            " or use --ray local"
        ) from None
    return True


def _unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """``host:port`` (or ``ray://host:port``) when nothing answers there within ``timeout_s``: Ray itself would
    retry for minutes. None when it answers, or when ``address`` names no port (``local``, empty)."""
    host, _, port = address.removeprefix("ray://").removeprefix("http://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError:
        return f"{host}:{port}"
    return None


def _on_ray(task: Callable, calls: Sequence[tuple], order: list[int], address: str, processes: int, counter):
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    connected = _connect(ray, address, processes)
    if counter:
        counter.start()
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_call)
        pending = {remote.remote(task, calls[i]): i for i in order}
        results: list = [None] * len(calls)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except ray.exceptions.WorkerCrashedError:
                    what = printable(str(calls[index][0])) if calls[index] else "a task"
                    raise DlprofError(
                        f"{what}: its Ray worker died (out of memory?); give its nodes more memory, or analyse fewer"
                        " ranks at once"
                    ) from None
                if counter:
                    counter.step()
        return results
    finally:
        if connected:
            ray.shutdown()


def _ray_call(task: Callable, call: tuple):
    """A Ray task: ``task(*call)`` in a Ray worker, which reads one trace after another (so the mmap threshold)."""
    fixed_mmap_threshold()
    return task(*call)
