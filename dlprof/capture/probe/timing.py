"""Span timing in one process: its span log, its probe state, and the timed collate, fetch and tokenizer calls,
with the facts of each collated batch (:mod:`.batch_facts`) measured after its spans.

Everything here runs in whichever process loads data: a DataLoader worker, or the main process when
``num_workers=0``. The hot paths append tuples in :data:`spanfile.RECORD` order to the process's
:class:`SpanLog`, which writes them once per batch.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dlprof.capture import spanfile
from dlprof.capture.probe import batch_facts
from dlprof.core import schema

_time_ns = time.time_ns
_perf_ns = time.perf_counter_ns

#: Tokenizer methods timed when a Dataset or collate_fn calls them. Only the outermost call of a
#: nest is recorded (``__call__`` calls ``_encode_plus``, ``encode`` calls ``__call__``, ...).
TOKENIZER_METHODS = ("__call__", "encode", "encode_plus", "batch_encode_plus", "tokenize", "pad", "apply_chat_template")


@dataclass(frozen=True)
class LoaderContext:
    """What a worker must know about the iterator it serves; travels to workers inside TimedCollate."""

    spans_dir: str
    loader_id: int
    epoch: int
    #: Batches of the epoch taken before this iterator began (an iterator built by a switch of worker settings
    #: continues the epoch): its task ``i`` is the epoch's batch ``batch_offset + i``.
    batch_offset: int = 0


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


class ProcessState:
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
        #: The batch ``collate_fn`` returned, until the fetch that asked for it has measured it.
        self.collated: Any = None


#: This process's probe state. Other modules read it as ``timing.STATE``, never import it by name:
#: :func:`set_state` replaces it (a new worker process, or uninstall).
STATE = ProcessState()
_SPAN = spanfile.KIND_SPAN
_TOKENS, _BYTES = spanfile.KIND_BATCH_TOKENS, spanfile.KIND_BATCH_BYTES
_NOT_LOOKED = object()
_BATCH, _FETCH, _TOKENIZER, _COLLATE = (
    spanfile.SPAN_CODE[name]
    for name in (schema.SPAN_BATCH, schema.SPAN_FETCH, schema.SPAN_TOKENIZER, schema.SPAN_COLLATE)
)


def set_state(state: ProcessState) -> None:
    """Make ``state`` this process's probe state."""
    global STATE
    STATE = state


def in_worker() -> bool:
    """Whether this process is a DataLoader worker (instrumented by dlprof)."""
    return STATE.worker_id >= 0


def flush() -> None:
    """Write what this process still holds."""
    if STATE.log is not None:
        STATE.log.flush()


def count_tensors(obj: Any, depth: int = 0) -> int:
    """Tensors in a collated batch (each is handed to the main process separately: its cost scales with them)."""
    if depth > 4:
        return 0
    if isinstance(obj, (dict, Mapping)):  # a transformers BatchEncoding is a Mapping, not a dict
        return sum(count_tensors(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(count_tensors(v, depth + 1) for v in obj)
    return 1 if type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage") else 0


class TimedCollate:
    """The user's ``collate_fn``, timed; carries the :class:`LoaderContext` into worker processes."""

    __slots__ = ("collate_fn", "ctx", "_pad_id")

    def __init__(self, collate_fn: Callable, ctx: LoaderContext):
        self.collate_fn = collate_fn
        self.ctx = ctx
        self._pad_id: Any = _NOT_LOOKED

    @property
    def pad_id(self) -> int | None:
        """The pad token id the user's ``collate_fn`` pads with, where it says (looked up once per process)."""
        if self._pad_id is _NOT_LOOKED:
            self._pad_id = batch_facts.pad_token_id(self.collate_fn)
        return self._pad_id

    def __call__(self, data: Any) -> Any:
        st = STATE
        if st.log is None:
            return self.collate_fn(data)
        st.collate_start = (_time_ns(), st.log.cpu_ns())
        batch = None
        try:
            batch = self.collate_fn(data)
            return batch
        finally:
            st.collate_end = (_time_ns(), st.log.cpu_ns())
            st.collated = batch

    def __getstate__(self):
        return (self.collate_fn, self.ctx)

    def __setstate__(self, state):
        self.collate_fn, self.ctx = state
        self._pad_id = _NOT_LOOKED


def _measure(collated: Any, collate: TimedCollate, made_ns: int, where: tuple) -> tuple[tuple, int]:
    """The batch's facts records (:mod:`dlprof.capture.spanfile`) and its tensor count.

    Never raises: a batch it cannot measure gets an unmeasured record, and the user's training goes on.
    """
    start = _perf_ns()
    try:
        facts = batch_facts.measure(collated, collate.pad_id)
    except Exception:
        unmeasured = ((_TOKENS, spanfile.UNMEASURED, 0, 0, 0, _perf_ns() - start, *where),)
        try:
            return unmeasured, count_tensors(collated)
        except Exception:
            return unmeasured, 0
    cost_ns = _perf_ns() - start
    return (
        (_TOKENS, facts.source, facts.real_tokens, facts.rows, facts.width, facts.longest, *where),
        (_BYTES, 0, facts.fingerprint, facts.nbytes, made_ns, cost_ns, *where),
    ), facts.tensors


def _timed_fetch(original: Callable) -> Callable:
    @functools.wraps(original)
    def fetch(self, possibly_batched_index):
        st = STATE
        collate = self.collate_fn
        if st.log is None or not isinstance(collate, TimedCollate):
            return original(self, possibly_batched_index)
        ctx = st.ctx if st.worker_id >= 0 else collate.ctx
        st.ctx = ctx
        batch = st.batch
        st.collate_start = st.collate_end = st.collated = None
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
                collated, st.collated = st.collated, None
                if collated is not None:
                    facts, tensors = _measure(collated, collate, end[0], (loader, epoch, batch, worker))
                    log.records += facts
                else:  # collate_fn raised
                    tensors = 0
                log.records += (
                    (_SPAN, _BATCH, t0, t1, cpu1 - cpu0, runq1 - runq0, loader, epoch, batch, worker),
                    (_SPAN, _FETCH, t0, start[0], start[1] - cpu0, 0, loader, epoch, batch, worker),
                    (
                        _SPAN,
                        _COLLATE,
                        start[0],
                        end[0],
                        end[1] - start[1],
                        tensors,
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

    return fetch


def _timed_tokenizer(original: Callable) -> Callable:
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        st = STATE
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

    return method


def patch(owner: type, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """Wrap ``owner.name`` once (a second call finds the marker and does nothing).

    Every wrapper keeps what it wraps as ``_dlprof_original``: the marker, and what uninstall puts back.
    """
    original = owner.__dict__.get(name)
    if original is None or hasattr(original, "_dlprof_original"):
        return
    wrapper = wrap(original)
    vars(wrapper)["_dlprof_original"] = original
    setattr(owner, name, wrapper)


def install_fetch_patches() -> None:
    """Time the dataset fetchers of this process (idempotent)."""
    from torch.utils.data._utils import fetch as fetch_module

    for fetcher in (fetch_module._MapDatasetFetcher, fetch_module._IterableDatasetFetcher):
        patch(fetcher, "fetch", _timed_fetch)


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
            patch(cls, name, _timed_tokenizer)
        pending.extend(cls.__subclasses__())
