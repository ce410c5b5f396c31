"""Measure this machine's DataLoader costs that a run may not show: the hand-off and worker start-up.

The hand-off is what the main process pays to receive a ready batch.

A batch a worker produced reaches the main process through a queue; each tensor in it is passed as
a shared-memory file descriptor, fetched over a socket from the worker. That costs enough per batch, and more
per tensor, to matter on a small VM, and a run recorded with ``num_workers=0`` cannot show it. So
``dlprof record`` measures it once, after training: one worker fills its prefetch queue, then the
main process times ``__next__`` on batches that are already waiting, for batches of 1 and of
:data:`MANY_TENSORS` tensors.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import cast

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

MANY_TENSORS = 4
#: Batches timed per size (the worker prefetches them all before timing starts).
TIMED_BATCHES = 12
#: Time the worker gets to fill its queue.
FILL_S = 0.4
#: A worker that cannot deliver a batch in this long (a starved or broken machine) ends the
#: calibration: the hand-off is then reported as unknown rather than holding up the record.
WORKER_TIMEOUT_S = 10


class _Tensors(Dataset):
    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return TIMED_BATCHES + 2

    def __getitem__(self, index: int):
        return tuple(torch.zeros(16) for _ in range(self.count))


def _process_cpu_ms(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return (times.user + times.system) * 1000


def _ready_next_ms(tensors: int) -> tuple[float, float]:
    """The main process's cost of receiving a ready batch of ``tensors`` tensors, and the worker's CPU per batch
    sent."""
    context = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    loader = DataLoader(
        _Tensors(tensors),
        batch_size=None,
        num_workers=1,
        prefetch_factor=TIMED_BATCHES + 2,
        multiprocessing_context=context,
        timeout=WORKER_TIMEOUT_S,
        sampler=range(2 * TIMED_BATCHES + 4),
    )
    iterator = cast(_MultiProcessingDataLoaderIter, iter(loader))  # num_workers=1: the worker's iterator
    next(iterator)  # the worker is up
    time.sleep(FILL_S)
    worker = iterator._workers[0].pid
    assert worker is not None  # a started process has its pid
    worker_cpu = _process_cpu_ms(worker)
    timings = []
    for _ in range(TIMED_BATCHES):
        start = time.perf_counter_ns()
        next(iterator)
        timings.append((time.perf_counter_ns() - start) / 1e6)
    time.sleep(FILL_S)  # the worker makes and sends as many batches again
    sent_cpu_ms = (_process_cpu_ms(worker) - worker_cpu) / TIMED_BATCHES
    del iterator
    return statistics.median(timings), sent_cpu_ms


def _per_batch_and_tensor(one: float, many: float) -> tuple[float, float]:
    per_tensor = max(0.0, (many - one) / (MANY_TENSORS - 1))
    return round(max(0.0, one - per_tensor), 4), round(per_tensor, 4)


def measure_handoff() -> dict | None:
    """A batch of ``t`` tensors costs the main process ``per_batch + t * per_tensor`` to receive, and its
    worker ``worker_per_batch + t * worker_per_tensor`` of CPU to send (moving tensors to shared memory)."""
    try:
        (one, one_sent), (many, many_sent) = _ready_next_ms(1), _ready_next_ms(MANY_TENSORS)
    except Exception:  # no worker processes possible here (sandboxes, no /dev/shm): leave it unknown
        return None
    per_batch, per_tensor = _per_batch_and_tensor(one, many)
    worker_per_batch, worker_per_tensor = _per_batch_and_tensor(one_sent, many_sent)
    return {
        "per_batch_ms": per_batch,
        "per_tensor_ms": per_tensor,
        "worker_per_batch_ms": worker_per_batch,
        "worker_per_tensor_ms": worker_per_tensor,
    }


#: Worker counts timed for the start-up calibration (a line through them gives fixed + per-worker cost).
STARTUP_WORKERS = (1, 2)
#: Each count is timed this often; the median is kept.
STARTUP_REPEATS = 3


def _epoch_ms(num_workers: int) -> float:
    """One whole epoch of a trivial dataset: workers started, one item each, workers shut down."""
    context = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    loader = DataLoader(
        _Tensors(1),
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context=context,
        timeout=WORKER_TIMEOUT_S,
        sampler=range(num_workers),
    )
    start = time.perf_counter_ns()
    for _ in loader:
        pass
    return (time.perf_counter_ns() - start) / 1e6


def measure_worker_startup() -> dict | None:
    """``{"fixed_ms", "per_worker_ms"}``: starting and stopping ``n`` workers once (an epoch boundary
    with ``persistent_workers=False``) costs the main process ``fixed + n * per_worker``.

    Measured in the training process after training, so forking copies the same page tables as the
    training's own workers did.
    """
    try:
        timed = {n: statistics.median(_epoch_ms(n) for _ in range(STARTUP_REPEATS)) for n in STARTUP_WORKERS}
    except Exception:
        return None
    low, high = STARTUP_WORKERS[0], STARTUP_WORKERS[-1]
    per_worker = max(0.0, (timed[high] - timed[low]) / (high - low))
    return {"fixed_ms": round(max(0.0, timed[low] - low * per_worker), 3), "per_worker_ms": round(per_worker, 3)}
