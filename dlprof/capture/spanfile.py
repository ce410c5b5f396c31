"""The span files DataLoader probes write while recording: fixed-size binary records, one file per process.

Binary because the cost per span matters (target < 5 µs), and packing a record costs a fraction of formatting a
text line. Each process appends to ``<spans_dir>/<pid>.spans``; a record
cut short by a killed process is dropped by the reader.

Every record is ``<kind, name, a_ns, b_ns, c_ns, d_ns, loader, epoch, batch, worker>``:

* ``KIND_SPAN``: a span ``name`` (index into :data:`SPAN_NAMES`) from ``a_ns`` to ``b_ns`` with ``c_ns``
  of CPU time, for ``batch`` of ``loader``/``epoch``, in ``worker`` (-1: the main process). ``d`` is
  kind-specific: for ``batch`` spans the run-queue wait in ns (runnable but not running: the cores
  were busy), for ``collate_fn`` spans the number of tensors in the collated batch.
* ``KIND_NEXT``: the main process's ``__next__`` from ``a_ns`` to ``b_ns`` that returned ``batch``.
* ``KIND_WORKER``: worker ``worker`` of ``loader`` started at ``a_ns`` serving ``epoch``
  (a :class:`~dlprof.core.manifest.WorkerStart`); ``batch`` holds the loader's num_workers, which the
  manifest takes from the loader's settings instead.
* ``KIND_BATCH_TOKENS`` and ``KIND_BATCH_BYTES``, one pair per batch a ``collate_fn`` returned, written with its
  spans (:mod:`dlprof.capture.probe.batch_facts` measures it): the tokens record's ``name`` says how padding was
  told (an index into :data:`PADDING_SOURCES`), ``a`` = real tokens, ``b`` = rows, ``c`` = width, ``d`` = the
  longest real sequence; the bytes record's ``a`` = the fingerprint, ``b`` = bytes of its tensors, ``c`` = when
  ``collate_fn`` returned (``time_ns``), ``d`` = what measuring it cost in ns. A batch that could not be measured
  has a tokens record alone, named :data:`UNMEASURED`, with the cost in ``d``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dlprof.core import schema
from dlprof.core.manifest import WorkerStart

RECORD = struct.Struct("<BBqqqqiiii")
KIND_SPAN, KIND_NEXT, KIND_WORKER, KIND_BATCH_TOKENS, KIND_BATCH_BYTES = 1, 2, 3, 4, 5
#: How a batch's real tokens were told from padding (``BatchFacts.padding_source``), by the tokens record's name.
PADDING_SOURCES: tuple[str | None, ...] = (None, "attention_mask", "labels", "pad_id")
UNMEASURED = 255
SPAN_NAMES = schema.SPAN_NAMES
SPAN_CODE = {name: code for code, name in enumerate(SPAN_NAMES)}
SUFFIX = ".spans"


@dataclass(kw_only=True)
class SpanRecord:
    pid: int
    name: str
    start_ns: int
    end_ns: int
    cpu_ns: int
    extra: int  # batch: run-queue wait in ns; collate_fn: tensors in the batch
    loader_id: int
    epoch: int
    batch: int
    worker_id: int


@dataclass(kw_only=True)
class NextCallRecord:
    start_ns: int
    end_ns: int
    loader_id: int
    epoch: int
    batch: int


@dataclass(kw_only=True)
class BatchRecord:
    """What the probe measured of one batch (a :class:`~dlprof.core.manifest.BatchFacts` entry)."""

    pid: int
    loader_id: int
    epoch: int
    batch: int
    worker_id: int
    made_ns: int
    rows: int
    width: int
    real_tokens: int
    longest: int
    nbytes: int
    fingerprint: str  # 16 hex digits; "" where not known
    padding_source: str | None
    check_ns: int


def hex_fingerprint(fingerprint: int) -> str:
    """A record's signed 64-bit fingerprint as the manifest spells it: 16 hex digits, or "" where unknown (0)."""
    return format(fingerprint & 0xFFFF_FFFF_FFFF_FFFF, "016x") if fingerprint else ""


@dataclass(kw_only=True)
class SpanFiles:
    """Everything the probes wrote in a run's spans directory."""

    workers: list[WorkerStart] = field(default_factory=list)
    spans: list[SpanRecord] = field(default_factory=list)
    next_calls: list[NextCallRecord] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    #: Batches whose measurement failed (skipped, the training unharmed).
    batches_unmeasured: int = 0
    skipped_records: int = 0


def run_queue_clock() -> Callable[[], int]:
    """A function returning this thread's total run-queue wait in ns (Linux schedstat), or 0 elsewhere.

    One ``pread`` of an open procfs file: cheap enough to read twice per batch.
    """
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        int(os.pread(fd, 128, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return lambda: 0
    return lambda: int(os.pread(fd, 128, 0).split()[1])


def path_for(spans_dir: str, pid: int) -> str:
    return f"{spans_dir}/{pid}{SUFFIX}"


def read_span_files(spans_dir: Path) -> SpanFiles:
    """Parse every span file in ``spans_dir``; incomplete or unknown records are skipped and counted."""
    found = SpanFiles()
    if not spans_dir.is_dir():
        return found
    for path in sorted(spans_dir.glob("*" + SUFFIX)):
        pid = int(path.stem)
        data = path.read_bytes()
        whole = len(data) - len(data) % RECORD.size
        found.skipped_records += len(data) % RECORD.size and 1
        tokens = None  # a batch's tokens record, until its bytes record follows
        for record in RECORD.iter_unpack(data[:whole]):
            kind, name, a, b, c, d, loader, epoch, batch, worker = record
            if tokens is not None and (kind != KIND_BATCH_BYTES or tokens[6:] != record[6:]):
                found.skipped_records += 1  # a tokens record without its bytes record
                tokens = None
            if kind == KIND_SPAN and name < len(SPAN_NAMES):
                found.spans.append(
                    SpanRecord(
                        pid=pid,
                        name=SPAN_NAMES[name],
                        start_ns=a,
                        end_ns=b,
                        cpu_ns=c,
                        extra=d,
                        loader_id=loader,
                        epoch=epoch,
                        batch=batch,
                        worker_id=worker,
                    )
                )
            elif kind == KIND_NEXT:
                found.next_calls.append(
                    NextCallRecord(start_ns=a, end_ns=b, loader_id=loader, epoch=epoch, batch=batch)
                )
            elif kind == KIND_WORKER:
                found.workers.append(WorkerStart(pid=pid, worker_id=worker, loader=loader, epoch=epoch, start_ns=a))
            elif kind == KIND_BATCH_TOKENS and name == UNMEASURED:
                found.batches_unmeasured += 1
            elif kind == KIND_BATCH_TOKENS and name < len(PADDING_SOURCES):
                tokens = record
            elif kind == KIND_BATCH_BYTES and tokens is not None:
                found.batches.append(_batch_record(pid, tokens, record))
                tokens = None
            else:
                found.skipped_records += 1
        found.skipped_records += tokens is not None
    return found


def _batch_record(pid: int, tokens: tuple, sizes: tuple) -> BatchRecord:
    _, source, real_tokens, rows, width, longest, loader, epoch, batch, worker = tokens
    _, _, fingerprint, nbytes, made_ns, check_ns, *_ = sizes
    return BatchRecord(
        pid=pid,
        loader_id=loader,
        epoch=epoch,
        batch=batch,
        worker_id=worker,
        made_ns=made_ns,
        rows=rows,
        width=width,
        real_tokens=real_tokens,
        longest=longest,
        nbytes=nbytes,
        fingerprint=hex_fingerprint(fingerprint),
        padding_source=PADDING_SOURCES[source],
        check_ns=check_ns,
    )
