"""The DataLoader worker loop, probed: each worker process starts its own span log and learns which batch it fetches.

:func:`_probed_worker_loop` stands in for ``torch.utils.data._utils.worker._worker_loop``. It must stay a
module-level function of this module: with the spawn start method the DataLoader pickles its worker
target by name, and the new process imports it from here.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dlprof.capture import spanfile
from dlprof.capture.probe import timing
from dlprof.capture.probe.timing import LoaderContext, ProcessState, SpanLog, TimedCollate

_time_ns = time.time_ns

#: torch's own ``_worker_loop``, while :func:`install` has replaced it in this process.
_ORIGINALS: dict[str, Any] = {}


class _IndexQueueTap:
    """Wraps a worker's index queue: each task names the batch index the worker is about to fetch."""

    def __init__(self, queue: Any):
        self._queue = queue

    def get(self, *args, **kwargs):
        task = self._queue.get(*args, **kwargs)
        st = timing.STATE
        if type(task) is tuple and len(task) == 2:
            st.batch = task[0] + (st.ctx.batch_offset if st.ctx is not None else 0)
        elif task is not None and type(task).__name__ == "_ResumeIteration" and st.ctx is not None:
            # persistent_workers: the same worker serves the next epoch, from its first batch
            st.ctx = replace(st.ctx, epoch=st.ctx.epoch + 1, batch_offset=0)
        return task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def _original_worker_loop() -> Callable:
    saved = _ORIGINALS.get("worker_loop")
    if saved is not None:
        return saved
    from torch.utils.data._utils import worker  # in a spawned worker: torch's own, never patched

    return worker._worker_loop


def _start_worker_log(ctx: LoaderContext, worker_id: int, num_workers: Any) -> None:
    """Give this (new) worker process its own state and span file."""
    state = ProcessState()
    # Worker processes run the loading work alone, so the process's CPU time is the loading's
    # (tokenizers may use threads of their own).
    state.log = SpanLog(spanfile.path_for(ctx.spans_dir, os.getpid()), time.process_time_ns)
    state.spans_dir = ctx.spans_dir
    state.worker_id = worker_id
    state.ctx = ctx
    workers = num_workers if isinstance(num_workers, int) else -1
    state.log.records.append(
        (spanfile.KIND_WORKER, 0, _time_ns(), 0, 0, 0, ctx.loader_id, ctx.epoch, workers, worker_id)
    )
    state.log.flush()
    timing.set_state(state)


def _probed_worker_loop(*args, **kwargs):
    """Stands in for torch's ``_worker_loop``: start the worker's log, then run the real loop."""
    original = _original_worker_loop()
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
        arguments = bound.arguments
        collate = arguments.get("collate_fn")
        if isinstance(collate, TimedCollate) and "index_queue" in arguments:
            timing.install_fetch_patches()
            timing.install_tokenizer_patches()
            _start_worker_log(collate.ctx, int(arguments.get("worker_id", -1)), arguments.get("num_workers"))
            arguments["index_queue"] = _IndexQueueTap(arguments["index_queue"])
            args, kwargs = bound.args, bound.kwargs
    except Exception as error:  # the probe must never stop the user's training
        print(f"dlprof: DataLoader worker probe disabled in pid {os.getpid()}: {error}", file=sys.stderr)
    return original(*args, **kwargs)


def install() -> None:
    """Make the DataLoader workers this process starts from now on run :func:`_probed_worker_loop` (idempotent)."""
    from torch.utils.data._utils import worker as worker_module

    if worker_module._worker_loop is not _probed_worker_loop:
        _ORIGINALS["worker_loop"] = worker_module._worker_loop
        worker_module._worker_loop = _probed_worker_loop


def uninstall() -> None:
    """Give torch back its own worker loop."""
    from torch.utils.data._utils import worker as worker_module

    if "worker_loop" in _ORIGINALS:
        worker_module._worker_loop = _ORIGINALS.pop("worker_loop")
