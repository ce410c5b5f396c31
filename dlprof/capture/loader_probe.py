"""Spans inside DataLoader workers: dataset fetch, tokenizer calls and ``collate_fn``, per batch.

Nothing a worker process does appears in the main process's ``torch.profiler`` trace, and a
``torch.profiler`` per worker costs ~58 µs a sample and loses everything when a worker is killed
(DESIGN.md, facts). So each process (every worker, and the main process when ``num_workers=0``)
keeps a pure-Python log of ``time.time_ns()`` spans (the clock Kineto's ``baseTimeNanoseconds`` is
on) and appends it to ``<spans_dir>/<pid>.spans`` once per batch with one ``os.write``: a killed
worker loses at most the batch it was working on.

How the probe gets in, without a change to the user's code:

* ``DataLoader.__init__`` is wrapped to remember the loader's settings as it really got them.
* ``DataLoader._get_iterator`` hands the new iterator a :class:`TimedCollate` (the user's
  ``collate_fn`` plus a :class:`LoaderContext`) and restores the user's ``collate_fn`` at once; the
  iterator passes it to every worker, pickled when the start method is spawn.
* ``torch.utils.data._utils.worker._worker_loop`` is replaced by :func:`_probed_worker_loop`, a
  module-level function (so spawn can pickle it by name), which starts the worker's log and taps the
  worker's index queue to learn the index of the batch it is producing.
* The dataset fetchers' ``fetch`` and the tokenizer's public entry points are timed in place.

The records are described in :mod:`dlprof.capture.spanfile`.
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dlprof import schema
from dlprof.capture import spanfile

_time_ns = time.time_ns

#: Tokenizer methods timed when a Dataset or collate_fn calls them. Only the outermost call of a
#: nest is recorded (``__call__`` calls ``_encode_plus``, ``encode`` calls ``__call__``, ...).
TOKENIZER_METHODS = ("__call__", "encode", "encode_plus", "batch_encode_plus", "tokenize", "pad", "apply_chat_template")


@dataclass(frozen=True)
class LoaderContext:
    """What a worker must know about the iterator it serves; travels to workers inside TimedCollate."""

    spans_dir: str
    loader_id: int
    epoch: int


class SpanLog:
    """Append-only span file of one process; records are buffered and written once per batch."""

    __slots__ = ("path", "cpu_ns", "runq_ns", "records", "write_failed", "_fd")

    def __init__(self, path: str, cpu_ns: Callable[[], int]):
        self.path = path
        self.cpu_ns = cpu_ns
        self.runq_ns = spanfile.run_queue_clock()
        #: Tuples in :data:`spanfile.RECORD` order; appended to directly on the hot paths.
        self.records: list[tuple] = []
        self.write_failed = False
        self._fd: int | None = None

    def flush(self) -> None:
        if not self.records:
            return
        pack = spanfile.RECORD.pack
        data = b"".join([pack(*record) for record in self.records])
        self.records.clear()
        try:
            if self._fd is None:
                # A raw descriptor, not a buffered file object: a forked child inherits no Python buffer
                # that could be written twice.
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self._fd, data)
        except OSError as error:  # a full disk loses these spans, never the user's training
            if not self.write_failed:
                print(
                    f"dlprof: could not write DataLoader spans to {self.path} ({error.strerror}); they are left out",
                    file=sys.stderr,
                )
            self.write_failed = True


class _ProcessState:
    """Per-process probe state. Loading runs on one thread per process, so no locks are needed."""

    def __init__(self) -> None:
        self.log: SpanLog | None = None
        self.spans_dir: str | None = None
        self.worker_id = -1
        self.ctx: LoaderContext | None = None  # in a worker: the iterator it serves, epoch included
        self.batch = -1
        self.in_loader = False  # inside a fetch (dataset access or collate_fn)
        self.tokenizer_depth = 0
        self.collate_start: tuple[int, int] | None = None
        self.collate_end: tuple[int, int] | None = None
        self.batch_tensors = 0


_STATE = _ProcessState()
_SPAN = spanfile.KIND_SPAN
_BATCH, _FETCH, _TOKENIZER, _COLLATE = (
    spanfile.SPAN_CODE[name]
    for name in (schema.SPAN_BATCH, schema.SPAN_FETCH, schema.SPAN_TOKENIZER, schema.SPAN_COLLATE)
)
_LOADER_CALLBACKS: list[Callable[[str, int], None]] = []
_LOADERS: list[LoaderRecord] = []
_ORIGINALS: dict[str, Any] = {}
_OVERRIDES: dict[str, Any] = {}

#: Events passed to loader callbacks, with the nanoseconds the main thread spent in the DataLoader.
EVENT_BATCH = "batch"  # __next__ returned a batch
EVENT_EPOCH_END = "epoch_end"  # __next__ found the epoch exhausted (non-persistent workers shut down in it)
EVENT_EPOCH_START = "epoch_start"  # __iter__ created or reset an iterator (workers started)


@dataclass
class EpochRecord:
    """One iteration over a DataLoader, timed in the main process."""

    start_ns: int
    iter_ns: int = 0  # inside __iter__ (iterator creation: worker processes started)
    first_batch_ns: int | None = None  # when the first batch was returned
    batches: int = 0
    end_ns: int | None = None  # duration of the __next__ that raised StopIteration

    def as_manifest(self) -> dict:
        first = None if self.first_batch_ns is None else round((self.first_batch_ns - self.start_ns) / 1e6, 3)
        end = None if self.end_ns is None else round(self.end_ns / 1e6, 3)
        return {"start_ns": self.start_ns, "first_batch_ms": first, "batches": self.batches, "end_ms": end}


@dataclass
class LoaderRecord:
    """One DataLoader the script created, with its settings as the DataLoader really got them."""

    loader_id: int
    config: dict
    iterations: int = 0
    batches: int = 0
    length: int | None = None
    epochs: list[EpochRecord] = field(default_factory=list)


def count_tensors(obj: Any, depth: int = 0) -> int:
    """Tensors in a collated batch (each is handed to the main process separately: its cost scales with them)."""
    if depth > 4:
        return 0
    if isinstance(obj, dict):
        return sum(count_tensors(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(count_tensors(v, depth + 1) for v in obj)
    return 1 if type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage") else 0


class TimedCollate:
    """The user's ``collate_fn``, timed; carries the :class:`LoaderContext` into worker processes."""

    __slots__ = ("collate_fn", "ctx")

    def __init__(self, collate_fn: Callable, ctx: LoaderContext):
        self.collate_fn = collate_fn
        self.ctx = ctx

    def __call__(self, data: Any) -> Any:
        st = _STATE
        if st.log is None:
            return self.collate_fn(data)
        st.collate_start = (_time_ns(), st.log.cpu_ns())
        batch = None
        try:
            batch = self.collate_fn(data)
            return batch
        finally:
            st.collate_end = (_time_ns(), st.log.cpu_ns())
            st.batch_tensors = count_tensors(batch)

    def __getstate__(self):
        return (self.collate_fn, self.ctx)

    def __setstate__(self, state):
        self.collate_fn, self.ctx = state


# ---------------------------------------------------------------------------------------- fetch


def _timed_fetch(original: Callable) -> Callable:
    @functools.wraps(original)
    def fetch(self, possibly_batched_index):
        st = _STATE
        collate = self.collate_fn
        if st.log is None or not isinstance(collate, TimedCollate):
            return original(self, possibly_batched_index)
        ctx = st.ctx if st.worker_id >= 0 else collate.ctx
        st.ctx = ctx
        batch = st.batch
        st.collate_start = st.collate_end = None
        st.in_loader = True
        cpu_ns, runq_ns = st.log.cpu_ns, st.log.runq_ns
        # The CPU and run-queue clocks are read inside the wall-clock span: a wait for a core between
        # the reads then never counts in the run-queue time without counting in the span (runq <= dur).
        t0 = _time_ns()
        runq0 = runq_ns()
        cpu0 = cpu_ns()
        try:
            return original(self, possibly_batched_index)
        finally:
            cpu1 = cpu_ns()
            runq1 = runq_ns()
            t1 = _time_ns()
            st.in_loader = False
            log, worker = st.log, st.worker_id
            loader, epoch = ctx.loader_id, ctx.epoch
            start, end = st.collate_start, st.collate_end
            if start is not None and end is not None:
                log.records += (
                    (_SPAN, _BATCH, t0, t1, cpu1 - cpu0, runq1 - runq0, loader, epoch, batch, worker),
                    (_SPAN, _FETCH, t0, start[0], start[1] - cpu0, 0, loader, epoch, batch, worker),
                    (
                        _SPAN,
                        _COLLATE,
                        start[0],
                        end[0],
                        end[1] - start[1],
                        st.batch_tensors,
                        loader,
                        epoch,
                        batch,
                        worker,
                    ),
                )
            elif sys.exc_info()[0] is not StopIteration:  # StopIteration: an exhausted IterableDataset, no batch
                # The dataset raised: keep the time it took, the exception goes on to the user.
                log.records.append((_SPAN, _FETCH, t0, t1, cpu1 - cpu0, 0, loader, epoch, batch, worker))
            log.flush()

    fetch._dlprof_original = original
    return fetch


def _timed_tokenizer(original: Callable) -> Callable:
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        st = _STATE
        if not st.in_loader or st.tokenizer_depth:
            return original(self, *args, **kwargs)
        st.tokenizer_depth = 1
        cpu_ns = st.log.cpu_ns
        cpu0 = cpu_ns()
        t0 = _time_ns()
        try:
            return original(self, *args, **kwargs)
        finally:
            t1 = _time_ns()
            st.tokenizer_depth = 0
            ctx = st.ctx
            st.log.records.append(
                (_SPAN, _TOKENIZER, t0, t1, cpu_ns() - cpu0, 0, ctx.loader_id, ctx.epoch, st.batch, st.worker_id)
            )

    method._dlprof_original = original
    return method


def _patch(owner: type, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Wrap ``owner.name`` once (a second call finds the marker and does nothing)."""
    original = owner.__dict__.get(name)
    if original is None or hasattr(original, "_dlprof_original"):
        return
    setattr(owner, name, wrap(original))


def install_fetch_patches() -> None:
    """Time the dataset fetchers of this process (idempotent)."""
    from torch.utils.data._utils import fetch as fetch_module

    for fetcher in (fetch_module._MapDatasetFetcher, fetch_module._IterableDatasetFetcher):
        _patch(fetcher, "fetch", _timed_fetch)


def install_tokenizer_patches() -> None:
    """Time the tokenizer entry points, if transformers is loaded in this process (idempotent).

    Only called where transformers is already imported: importing it here would cost seconds in a
    script that does not use it.
    """
    base_module = sys.modules.get("transformers.tokenization_utils_base")
    if base_module is None:
        return
    base = base_module.PreTrainedTokenizerBase
    pending, seen = [base], set()
    while pending:  # subclasses that override an entry point get their override timed too
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for name in TOKENIZER_METHODS:
            _patch(cls, name, _timed_tokenizer)
        pending.extend(cls.__subclasses__())


# ---------------------------------------------------------------------------------------- workers


class _IndexQueueTap:
    """Wraps a worker's index queue: each task names the batch index the worker is about to fetch."""

    def __init__(self, queue: Any):
        self._queue = queue

    def get(self, *args, **kwargs):
        task = self._queue.get(*args, **kwargs)
        st = _STATE
        if type(task) is tuple and len(task) == 2:
            st.batch = task[0]
        elif task is not None and type(task).__name__ == "_ResumeIteration" and st.ctx is not None:
            # persistent_workers: the same worker serves the next epoch
            st.ctx = replace(st.ctx, epoch=st.ctx.epoch + 1)
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
    global _STATE
    state = _ProcessState()
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
    _STATE = state


def _probed_worker_loop(*args, **kwargs):
    """Stands in for torch's ``_worker_loop``: start the worker's log, then run the real loop."""
    original = _original_worker_loop()
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
        arguments = bound.arguments
        collate = arguments.get("collate_fn")
        if isinstance(collate, TimedCollate) and "index_queue" in arguments:
            install_fetch_patches()
            install_tokenizer_patches()
            _start_worker_log(collate.ctx, int(arguments.get("worker_id", -1)), arguments.get("num_workers"))
            arguments["index_queue"] = _IndexQueueTap(arguments["index_queue"])
            args, kwargs = bound.args, bound.kwargs
    except Exception as error:  # the probe must never stop the user's training
        print(f"dlprof: DataLoader worker probe disabled in pid {os.getpid()}: {error}", file=sys.stderr)
    return original(*args, **kwargs)


# ---------------------------------------------------------------------------------------- main process


def _loader_config(loader: Any) -> dict:
    """The settings a DataLoader really got (after its own defaults and validation)."""
    dataset = loader.dataset
    try:
        dataset_len = len(dataset)
    except Exception:
        dataset_len = None
    context = loader.multiprocessing_context
    if context is None:
        start_method = (
            multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
        )
    else:
        start_method = context if isinstance(context, str) else context.get_start_method()
    collate = loader.collate_fn
    batch_size = loader.batch_size
    if batch_size is None:
        # accelerate re-creates a Trainer's DataLoader with a batch_sampler (its BatchSamplerShard knows the size).
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
    return {
        "num_workers": loader.num_workers,
        "batch_size": batch_size if isinstance(batch_size, int) and not isinstance(batch_size, bool) else None,
        "pin_memory": bool(loader.pin_memory),
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": bool(loader.persistent_workers),
        "drop_last": bool(loader.drop_last),
        "timeout_s": loader.timeout,
        "in_order": bool(getattr(loader, "in_order", True)),
        "start_method": start_method if loader.num_workers > 0 else None,
        "dataset": f"{type(dataset).__module__}.{type(dataset).__qualname__}",
        "dataset_len": dataset_len,
        "iterable_dataset": loader._dataset_kind == 1,
        "sampler": type(loader.sampler).__qualname__ if loader.sampler is not None else None,
        "collate_fn": getattr(collate, "__qualname__", type(collate).__qualname__),
        "created_by": created_by(),
    }


#: Training frameworks that create DataLoaders, by the module of a frame on the stack as one is built
#: (``frame.f_globals["__name__"]``), most specific first: ms-swift and LLaMA-Factory build theirs through
#: Hugging Face's Trainer, so their frames and the Trainer's are on the stack together.
#: A prefix ending in "." names a package ("swift." is not "swiftly"); "transformers.trainer" also covers
#: trainer_seq2seq and the Trainer's helper modules.
FRAMEWORK_MODULES = (
    ("swift.", "ms-swift"),
    ("llamafactory.", "llamafactory"),
    ("transformers.trainer", "transformers"),
)


def created_by() -> str | None:
    """The training framework creating a DataLoader now (called inside its ``__init__``), or None for the user's own
    code."""
    found = set()
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str):
            for prefix, name in FRAMEWORK_MODULES:
                if module.startswith(prefix) or module == prefix.rstrip("."):
                    found.add(name)
        frame = frame.f_back
    return next((name for _, name in FRAMEWORK_MODULES if name in found), None)


def _record_of(loader: Any) -> LoaderRecord | None:
    loader_id = loader.__dict__.get("_dlprof_loader_id")
    return None if loader_id is None else _LOADERS[loader_id]


def _override(original: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict, int | None]:
    """Apply ``dlprof sweep``'s ``num_workers`` to a DataLoader's arguments; returns what the script asked for."""
    wanted = _OVERRIDES.get("num_workers")
    if wanted is None:
        return args, kwargs, None
    bound = inspect.signature(original).bind(None, *args, **kwargs)
    arguments = bound.arguments
    requested = arguments.get("num_workers", 0)
    arguments["num_workers"] = wanted
    if wanted == 0:  # DataLoader rejects these without workers
        arguments.pop("prefetch_factor", None)
        arguments["persistent_workers"] = False
    return bound.args[1:], bound.kwargs, requested


def _wrap_init(original: Callable) -> Callable:
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        args, kwargs, requested = _override(original, args, kwargs)
        original(self, *args, **kwargs)
        try:
            record = LoaderRecord(len(_LOADERS), {**_loader_config(self), "num_workers_requested": requested})
            _LOADERS.append(record)
            self._dlprof_loader_id = record.loader_id
        except Exception as error:
            print(f"dlprof: could not read a DataLoader's settings: {error}", file=sys.stderr)

    __init__._dlprof_original = original
    return __init__


def _wrap_get_iterator(original: Callable) -> Callable:
    @functools.wraps(original)
    def _get_iterator(self):
        record, spans_dir = _record_of(self), _STATE.spans_dir
        if record is None or spans_dir is None:
            return original(self)
        if "transformers" in sys.modules:
            install_tokenizer_patches()  # before any fork: workers inherit it
        user_collate = self.collate_fn
        self.collate_fn = TimedCollate(user_collate, LoaderContext(spans_dir, record.loader_id, record.iterations))
        try:
            return original(self)
        finally:
            self.collate_fn = user_collate  # the user's loader looks untouched

    _get_iterator._dlprof_original = original
    return _get_iterator


def _wrap_iter(original: Callable) -> Callable:
    @functools.wraps(original)
    def __iter__(self):
        record = _record_of(self)
        if record is None:
            return original(self)
        start = _time_ns()
        iterator = original(self)
        epoch = EpochRecord(start, iter_ns=_time_ns() - start)
        try:
            record.length = len(self)
        except TypeError:  # an IterableDataset without __len__: epochs have no known length
            record.length = None
        record.epochs.append(epoch)
        iterator._dlprof_ctx = LoaderContext(_STATE.spans_dir or "", record.loader_id, record.iterations)
        iterator._dlprof_epoch = epoch
        record.iterations += 1
        for callback in tuple(_LOADER_CALLBACKS):
            callback(EVENT_EPOCH_START, epoch.iter_ns)
        return iterator

    __iter__._dlprof_original = original
    return __iter__


def _wrap_next(original: Callable) -> Callable:
    @functools.wraps(original)
    def __next__(self):
        st = _STATE
        ctx = self.__dict__.get("_dlprof_ctx")
        if ctx is None or st.log is None:
            return original(self)
        batch = self._num_yielded  # the index of the batch this call returns (in_order loaders)
        epoch = self.__dict__.get("_dlprof_epoch")
        t0 = _time_ns()
        try:
            data = original(self)
        except StopIteration:
            if epoch is not None and epoch.end_ns is None:
                epoch.end_ns = _time_ns() - t0
                for callback in _LOADER_CALLBACKS:
                    callback(EVENT_EPOCH_END, epoch.end_ns)
            raise
        t1 = _time_ns()
        st.log.records.append((spanfile.KIND_NEXT, 0, t0, t1, 0, 0, ctx.loader_id, ctx.epoch, batch, -1))
        st.log.flush()
        _LOADERS[ctx.loader_id].batches += 1
        if epoch is not None:
            epoch.batches += 1
            if epoch.first_batch_ns is None:
                epoch.first_batch_ns = t1
        for callback in _LOADER_CALLBACKS:
            callback(EVENT_BATCH, t1 - t0)
        return data

    __next__._dlprof_original = original
    return __next__


def _wrap_single_process_next_data(original: Callable) -> Callable:
    @functools.wraps(original)
    def _next_data(self):
        _STATE.batch = self._num_yielded  # num_workers=0: the fetch that follows is this batch
        return original(self)

    _next_data._dlprof_original = original
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
    from torch.utils.data._utils import worker as worker_module

    os.makedirs(spans_dir, exist_ok=True)
    _OVERRIDES.clear()
    _OVERRIDES.update(overrides or {})
    _STATE.spans_dir = spans_dir
    _STATE.log = SpanLog(spanfile.path_for(spans_dir, os.getpid()), time.thread_time_ns)
    loader_cls = dataloader_module.DataLoader
    _patch(loader_cls, "__init__", _wrap_init)
    _patch(loader_cls, "__iter__", _wrap_iter)
    _patch(dataloader_module._BaseDataLoaderIter, "__next__", _wrap_next)
    if not spans:
        return
    _patch(loader_cls, "_get_iterator", _wrap_get_iterator)
    _patch(dataloader_module._SingleProcessDataLoaderIter, "_next_data", _wrap_single_process_next_data)
    install_fetch_patches()
    if worker_module._worker_loop is not _probed_worker_loop:
        _ORIGINALS["worker_loop"] = worker_module._worker_loop
        worker_module._worker_loop = _probed_worker_loop


def uninstall() -> None:
    """Undo :func:`install` in this process (for tests and benchmarks that compare with and without)."""
    import torch.utils.data.dataloader as dataloader_module
    from torch.utils.data._utils import fetch as fetch_module
    from torch.utils.data._utils import worker as worker_module

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
    if "worker_loop" in _ORIGINALS:
        worker_module._worker_loop = _ORIGINALS.pop("worker_loop")
    global _STATE
    _STATE = _ProcessState()
    _LOADER_CALLBACKS.clear()
    _LOADERS.clear()
    _OVERRIDES.clear()


def add_loader_callback(callback: Callable[[str, int], None]) -> None:
    """Call ``callback(event, ns)`` in the main process for each :data:`EVENT_BATCH`, :data:`EVENT_EPOCH_START`
    and :data:`EVENT_EPOCH_END`, with the nanoseconds the main thread spent in the DataLoader for it."""
    _LOADER_CALLBACKS.append(callback)


def in_worker() -> bool:
    """Whether this process is a DataLoader worker (instrumented by dlprof)."""
    return _STATE.worker_id >= 0


def loader_records() -> list[LoaderRecord]:
    """The DataLoaders created since :func:`install`, in creation order."""
    return list(_LOADERS)


def flush() -> None:
    """Write what the main process still holds."""
    if _STATE.log is not None:
        _STATE.log.flush()
