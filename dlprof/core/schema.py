"""The trace format dlprof writes: every name and key shared by the writer (capture/) and readers.

This module imports nothing from dlprof but :mod:`dlprof.core.version` (which imports nothing) and no third-party
package (the standard library only), so both sides can use it.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from dlprof.core import version

#: Top-level key of the manifest inside a trace file.
MANIFEST_KEY = "dlprof"
# The manifest itself, and its version, are dlprof.core.manifest.

#: ``cat`` of every event dlprof adds (worker spans, memory counters).
CATEGORY = "dlprof"

# Span names inside the data-loading path. ``batch`` encloses one batch's ``dataset fetch`` and
# ``collate_fn``; ``tokenizer`` spans nest inside whichever of the two called the tokenizer.
SPAN_BATCH = "batch"
SPAN_FETCH = "dataset fetch"
SPAN_TOKENIZER = "tokenizer"
SPAN_COLLATE = "collate_fn"
SPAN_NAMES = (SPAN_BATCH, SPAN_FETCH, SPAN_TOKENIZER, SPAN_COLLATE)

#: Process track name of DataLoader worker ``k`` (``.format(worker_id=k)``).
WORKER_PROCESS_NAME = "DataLoader worker {worker_id}"
#: Thread track, inside the main process, that holds loader spans when ``num_workers=0``.
MAIN_LOADER_THREAD_NAME = "DataLoader (main process)"
#: Synthetic thread id of that track: above Linux's largest pid (2**22), so it never collides.
MAIN_LOADER_TID_OFFSET = 1 << 30

#: Name of the memory counter events (``ph: "C"``); args are ``uss_mib`` and ``pss_mib``.
MEMORY_COUNTER = "memory (MiB)"

# Args dlprof adds to spans and to Kineto's ``enumerate(DataLoader)#...__next__`` events.
ARG_LOADER = "dlprof_loader"  # which DataLoader (0, 1, ... in creation order)
ARG_EPOCH = "dlprof_epoch"  # iteration over that loader (0, 1, ...)
ARG_BATCH = "dlprof_batch"  # batch index within the epoch, as the sampler produced it
ARG_WORKER = "dlprof_worker"  # worker id, or -1 for the main process
ARG_CPU_US = "cpu_us"  # CPU time of the span (process CPU in workers, thread CPU in the main process)
ARG_TENSORS = "tensors"  # collate_fn spans: tensors in the collated batch (each is handed over separately)
ARG_RUNQ_US = "runq_us"  # batch spans: time runnable but waiting for a core (Linux schedstat; 0 elsewhere)

#: The DataLoader's ``__next__`` annotation as PyTorch names it.
DATALOADER_NEXT_PREFIX = "enumerate(DataLoader)#"
DATALOADER_NEXT_SUFFIX = ".__next__"
#: Kineto writes ``__next__`` as ``user_annotation``; torch-tb-profiler 0.4.3 drops such events (other
#: than ProfilerStep), so dlprof re-labels them ``cpu_op`` and keeps the original here.
ARG_ORIGINAL_CATEGORY = "dlprof_original_cat"

STATUS_COMPLETE = "complete"
STATUS_PARTIAL = "partial"
#: The trials' traces of a ``--then best|keep`` recording, written while the training goes on: rewritten complete (or
#: partial) when it ends.
STATUS_TRAINING = "training"

#: Sub-folder of a run directory for scratch files while recording; gone when the run is complete. A record of a job
#: over several machines (dlprof.capture.job) uses ``<SCRATCH_DIR>-<node>`` instead: one per node, in one run directory.
SCRATCH_DIR = ".dlprof-scratch"
#: In the scratch folder: ``{"pid": N, "host": ..., "job": ...}``, the process recording into it, on which machine, and
#: the job it records (null: a job of its own).
SCRATCH_OWNER_FILE = "owner.json"
#: Suffix every trace file has; TensorBoard's plugin and HTA look for it.
TRACE_SUFFIX = ".pt.trace.json.gz"
#: In a run directory, the folder of ``<trace name less its suffix>.json`` files: the steps a launch of the recorded
#: command without the profiler timed (``dlprof record --plain-launch``), read by :mod:`dlprof.trace.plain_launch`. A
#: folder: HTA reads every ``.json`` and ``.gz`` file at the top of a run directory as a trace.
PLAIN_LAUNCH_DIR = "plain-launch"
#: The ``schema`` of that file.
PLAIN_LAUNCH_SCHEMA = version.PLAIN_LAUNCH_SCHEMA


def plain_launch_path(trace: Path) -> Path:
    """The file holding the steps of ``trace``'s plain launch (:data:`PLAIN_LAUNCH_DIR`)."""
    name = trace.name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trace.parent / PLAIN_LAUNCH_DIR / f"{name}.json"


def node_scratch_name(node: str) -> str:
    """The scratch folder of one node of a job (``node`` is a name of letters, digits, ``.``, ``_`` and ``-``)."""
    return f"{SCRATCH_DIR}-{node}"


def scratch_dirs(run_dir: Path) -> list[Path]:
    """Every scratch folder in ``run_dir``: a record's, or each node's of a job (none when it cannot be listed)."""
    try:
        return sorted(
            p for p in run_dir.glob(SCRATCH_DIR + "*") if p.name == SCRATCH_DIR or p.name.startswith(SCRATCH_DIR + "-")
        )
    except OSError:
        return []


@dataclass(frozen=True)
class ScratchOwner:
    """Who records into a scratch folder (its :data:`SCRATCH_OWNER_FILE`)."""

    pid: int
    #: The machine it runs on (None: written by a dlprof that did not say).
    host: str | None
    #: The job key it records (None: a job of its own).
    job: str | None
    #: It still runs; assumed of a process on another machine, which cannot be asked.
    alive: bool

    @property
    def where(self) -> str:
        """``pid N``, or ``pid N on HOST`` for a process on another machine."""
        remote = self.host is not None and self.host != socket.gethostname()
        return f"pid {self.pid}" + (f" on {self.host}" if remote else "")


def scratch_owners(run_dir: Path) -> list[ScratchOwner | None]:
    """The owner of each scratch folder in ``run_dir`` (:func:`scratch_dirs`); None where its file is unreadable."""
    return [read_scratch_owner(scratch) for scratch in scratch_dirs(run_dir)]


def read_scratch_owner(scratch: Path) -> ScratchOwner | None:
    """The owner of ``scratch``; None when its owner file is missing or unreadable."""
    try:
        document = json.loads((scratch / SCRATCH_OWNER_FILE).read_text())
        pid = int(document["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    host = document.get("host") if isinstance(document.get("host"), str) else None
    job = document.get("job") if isinstance(document.get("job"), str) else None
    if host is not None and host != socket.gethostname():
        return ScratchOwner(pid, host, job, alive=True)
    try:
        os.kill(pid, 0)
        alive = True
    except PermissionError:  # alive, under another user
        alive = True
    except (OSError, OverflowError):
        alive = False
    return ScratchOwner(pid, host, job, alive)


def is_dataloader_next(name: str) -> bool:
    """Whether an event name is the DataLoader's ``__next__`` annotation."""
    return name.startswith(DATALOADER_NEXT_PREFIX) and name.endswith(DATALOADER_NEXT_SUFFIX)
