"""The trace format dlprof writes: every name and key shared by the writer (capture/) and readers.

This module imports nothing from dlprof and no third-party package (the standard library only), so both sides can use
it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Top-level key of the manifest inside a trace file.
MANIFEST_KEY = "dlprof"
# The manifest itself, and its version, are dlprof.manifest.

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

#: Sub-folder of a run directory for scratch files while recording; gone when the run is complete.
SCRATCH_DIR = ".dlprof-scratch"
#: In the scratch folder: ``{"pid": N}``, the process recording the run (one record per run directory).
SCRATCH_OWNER_FILE = "owner.json"
#: Suffix every trace file has; TensorBoard's plugin and HTA look for it.
TRACE_SUFFIX = ".pt.trace.json.gz"


def scratch_owner(scratch: Path) -> int | None:
    """The pid of the live process recording into ``scratch`` (its :data:`SCRATCH_OWNER_FILE`); None when it is gone or
    unknown."""
    try:
        pid = int(json.loads((scratch / SCRATCH_OWNER_FILE).read_text())["pid"])
        os.kill(pid, 0)
    except PermissionError:  # alive, under another user
        return pid
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid


def is_dataloader_next(name: str) -> bool:
    """Whether an event name is the DataLoader's ``__next__`` annotation."""
    return name.startswith(DATALOADER_NEXT_PREFIX) and name.endswith(DATALOADER_NEXT_SUFFIX)
