"""Putting the probe into torch and taking it out again; the DataLoader's own methods, wrapped.

In the main process the wrapped ``DataLoader`` methods register each loader, time its epochs and
``__next__`` calls, hand each new iterator a :class:`~dlprof.capture.probe.timing.TimedCollate`, and
tell the loader callbacks (the recorder) about batches and epoch boundaries.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from dlprof.capture import spanfile
from dlprof.capture.probe import settings, switch, timing, trim, worker
from dlprof.capture.probe.settings import EpochRecord
from dlprof.capture.probe.timing import LoaderContext, SpanLog, TimedCollate

_time_ns = time.time_ns
_process_cpu_ns = time.process_time_ns
_thread_cpu_ns = time.thread_time_ns
_LOADER_CALLBACKS: list[Callable[[str, int], None]] = []

#: Events passed to loader callbacks, with the nanoseconds the main thread spent in the DataLoader.
EVENT_BATCH = "batch"  # __next__ returned a batch
EVENT_EPOCH_END = "epoch_end"  # __next__ found the epoch exhausted (non-persistent workers shut down in it)
EVENT_EPOCH_START = "epoch_start"  # __iter__ created or reset an iterator (workers started)


#: Batches already made when the last ``__next__`` began (the one it handed over included), -1 when unknown.
_READY = [-1]
#: The CPU time the main process's other threads (intra-op threads, the pin-memory thread) took while the main
#: thread was inside ``DataLoader.__next__``, ns, summed since the probe was installed.
_WAIT_OTHER_CPU = [0]
#: torch's iterator with worker processes (set by :func:`install`: torch is imported there, not here).
_MULTIPROCESS_ITER: list[Any] = [type(None)]


def batches_ready() -> int:
    """How many batches were already made when the main process's last ``DataLoader.__next__`` began, the one it
    returned included: kept by a switch of worker settings, received out of order, or queued by the workers; 0
    without workers (nothing is made ahead); -1 when it cannot be told. Read it in an :data:`EVENT_BATCH` callback.

    The trials and the reference steps use it to tell a surplus the workers made during a pause from their steady
    output (:mod:`dlprof.core.throughput`)."""
    return _READY[0]


def others_cpu_in_waits_ns() -> int:
    """The CPU time the main process's threads other than the training thread took while the training thread was
    inside ``DataLoader.__next__`` (ns, a running sum). With workers the training thread sleeps there, so nothing
    of the training's own work runs in that time: what its thread pools take then is spin-waiting (OpenMP's threads
    keep polling for the next parallel region) or the pin-memory thread's copying, on the cores the workers need."""
    return _WAIT_OTHER_CPU[0]


def _ready(outer: Any) -> int:
    delegate = outer.__dict__.get("_dlprof_delegate")
    kept = len(delegate.buffered) if delegate is not None else 0
    current = delegate.inner if delegate is not None else outer
    if not isinstance(current, _MULTIPROCESS_ITER[0]):
        return kept
    try:
        queued = current._data_queue.qsize()
        if current._pin_memory:  # the pin thread's input: made, not pinned yet
            queued += current._worker_result_queue.qsize()
        received = sum(1 for info in current._task_info.values() if len(info) == 2)
    except (AttributeError, NotImplementedError, OSError):  # qsize() is not implemented on macOS
        return -1
    return kept + received + queued


def add_loader_callback(callback: Callable[[str, int], None]) -> None:
    """Call ``callback(event, ns)`` in the main process for each :data:`EVENT_BATCH`, :data:`EVENT_EPOCH_START`
    and :data:`EVENT_EPOCH_END`, with the nanoseconds the main thread spent in the DataLoader for it."""
    _LOADER_CALLBACKS.append(callback)


def _wrap_init(original: Callable) -> Callable:
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        args, kwargs, requested = settings.apply_overrides(original, args, kwargs)
        original(self, *args, **kwargs)
        try:
            settings.register(self, requested)
        except Exception as error:
            print(f"dlprof: could not read a DataLoader's settings: {error}", file=sys.stderr)

    return __init__


def _wrap_get_iterator(original: Callable) -> Callable:
    @functools.wraps(original)
    def _get_iterator(self):
        record, spans_dir = settings.record_of(self), timing.STATE.spans_dir
        if record is None or spans_dir is None:
            return original(self)
        if "transformers" in sys.modules:
            timing.install_tokenizer_patches()  # before any fork: workers inherit it
        user_collate = self.collate_fn
        # A switch of worker settings builds an iterator that continues the epoch (its context says where).
        ctx = self.__dict__.get("_dlprof_next_ctx") or LoaderContext(spans_dir, record.loader_id, record.iterations)
        self.collate_fn = TimedCollate(user_collate, ctx)
        try:
            return original(self)
        finally:
            self.collate_fn = user_collate  # the user's loader looks untouched

    return _get_iterator


def _wrap_iter(original: Callable) -> Callable:
    @functools.wraps(original)
    def __iter__(self):
        record = settings.record_of(self)
        if record is None:
            return original(self)
        start = _time_ns()
        switched = switch.before_iter(self, record.loader_id) if switch.PENDING else None
        with switch.making_iterator(self, record.config):
            iterator = original(self)
        if switched is not None:
            switch.after_iter(iterator, switched, start)
        epoch = EpochRecord(start_ns=start, iter_ns=_time_ns() - start)
        try:
            record.length = len(self)
        except TypeError:  # an IterableDataset without __len__: epochs have no known length
            record.length = None
        record.epochs.append(epoch)
        iterator._dlprof_ctx = LoaderContext(timing.STATE.spans_dir or "", record.loader_id, record.iterations)
        iterator._dlprof_epoch = epoch
        record.iterations += 1
        for callback in tuple(_LOADER_CALLBACKS):
            callback(EVENT_EPOCH_START, epoch.iter_ns)
        return iterator

    return __iter__


def _wrap_next(original: Callable) -> Callable:
    @functools.wraps(original)
    def __next__(self):
        st = timing.STATE
        ctx = self.__dict__.get("_dlprof_ctx")
        if ctx is None or st.log is None:
            return original(self)
        batch = self._num_yielded  # the index of the batch this call returns (in_order loaders)
        epoch = self.__dict__.get("_dlprof_epoch")
        t0 = _time_ns()
        others0 = _process_cpu_ns() - _thread_cpu_ns()
        try:
            if switch.PENDING:  # the trials asked to switch worker settings: here, inside the step's wait
                switch.at_next(self, ctx)
            _READY[0] = _ready(self)
            delegate = self.__dict__.get("_dlprof_delegate")
            if delegate is None:
                data = original(self)
            else:  # switched inside this epoch: the rest of it comes from the new iterator
                data = delegate.next()
                self._num_yielded += 1
        except StopIteration:
            if "_dlprof_switched" in self.__dict__:
                switch.first_batch(self, None)
            if epoch is not None and epoch.end_ns is None:
                epoch.end_ns = _time_ns() - t0
                for callback in _LOADER_CALLBACKS:
                    callback(EVENT_EPOCH_END, epoch.end_ns)
            raise
        t1 = _time_ns()
        _WAIT_OTHER_CPU[0] += max(0, _process_cpu_ns() - _thread_cpu_ns() - others0)
        st.log.records.append((spanfile.KIND_NEXT, 0, t0, t1, 0, 0, ctx.loader_id, ctx.epoch, batch, -1))
        st.log.flush()
        record = settings.LOADERS[ctx.loader_id]
        record.batches += 1
        if trim.TRIMMING and ctx.loader_id in trim.TRIMMING:
            data = _trimmed(data)
        elif record.trim.batches < trim.CHECKED_BATCHES:
            _check(data, record.trim)
        if epoch is not None:
            epoch.batches += 1
            if epoch.first_batch_ns is None:
                epoch.first_batch_ns = t1
        if "_dlprof_switched" in self.__dict__:
            switch.first_batch(self, t1)
        for callback in _LOADER_CALLBACKS:
            callback(EVENT_BATCH, t1 - t0)
        return data

    return __next__


def _trimmed(data: Any) -> Any:
    try:
        return trim.trimmed(data)
    except Exception:  # an odd batch goes to the training as it came: the trials' measurement must not break it
        return data


def _check(data: Any, found: trim.TrimCheck) -> None:
    try:
        trim.check(data, found)
    except Exception as error:  # never raise into the training's loop
        found.refused = found.refused or f"checking a batch failed ({type(error).__name__})"
        found.batches = trim.CHECKED_BATCHES


def _wrap_single_process_next_data(original: Callable) -> Callable:
    @functools.wraps(original)
    def _next_data(self):
        timing.STATE.batch = self._num_yielded  # num_workers=0: the fetch that follows is this batch
        return original(self)

    return _next_data


def install(spans_dir: str, spans: bool = True, overrides: dict | None = None) -> None:
    """Instrument every DataLoader this process creates from now on.

    Args:
        spans_dir: directory for the span files of this process and of its workers.
        spans: record fetch, tokenizer and collate spans; when False only the loaders' settings and
            the main process's ``__next__`` calls are recorded (to measure what the spans cost).
        overrides: DataLoader settings to impose on every loader (``{"num_workers": n}``, dlprof sweep).
    """
    import torch.utils.data.dataloader as dataloader_module

    os.makedirs(spans_dir, exist_ok=True)
    settings.set_overrides(overrides)
    state = timing.STATE
    state.spans_dir = spans_dir
    state.log = SpanLog(spanfile.path_for(spans_dir, os.getpid()), time.thread_time_ns)
    loader_cls = dataloader_module.DataLoader
    _MULTIPROCESS_ITER[0] = dataloader_module._MultiProcessingDataLoaderIter
    timing.patch(loader_cls, "__init__", _wrap_init)
    timing.patch(loader_cls, "__iter__", _wrap_iter)
    timing.patch(dataloader_module._BaseDataLoaderIter, "__next__", _wrap_next)
    if not spans:
        return
    timing.patch(loader_cls, "_get_iterator", _wrap_get_iterator)
    timing.patch(dataloader_module._SingleProcessDataLoaderIter, "_next_data", _wrap_single_process_next_data)
    timing.install_fetch_patches()
    worker.install()


def uninstall() -> None:
    """Undo :func:`install` in this process (for tests and benchmarks that compare with and without)."""
    import torch.utils.data.dataloader as dataloader_module
    from torch.utils.data._utils import fetch as fetch_module

    owners = [
        dataloader_module.DataLoader,
        dataloader_module._BaseDataLoaderIter,
        dataloader_module._SingleProcessDataLoaderIter,
        fetch_module._MapDatasetFetcher,
        fetch_module._IterableDatasetFetcher,
    ]
    base_module = sys.modules.get("transformers.tokenization_utils_base")
    if base_module is not None:
        pending = [base_module.PreTrainedTokenizerBase]
        while pending:
            cls = pending.pop()
            owners.append(cls)
            pending.extend(cls.__subclasses__())
    for owner in owners:
        for name, value in list(vars(owner).items()):
            original = getattr(value, "_dlprof_original", None)
            if original is not None:
                setattr(owner, name, original)
    worker.uninstall()
    switch.PENDING.clear()
    trim.TRIMMING.clear()
    timing.set_state(timing.ProcessState())
    _LOADER_CALLBACKS.clear()
    settings.clear()
