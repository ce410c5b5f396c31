"""Spans inside DataLoader workers: dataset fetch, tokenizer calls and ``collate_fn``, per batch.

Nothing a worker process does appears in the main process's ``torch.profiler`` trace, and a
``torch.profiler`` per worker costs far more a sample than a pure-Python span and loses everything when a worker is
killed (docs/ARCHITECTURE.md#facts-the-code-relies-on). So each process (every worker, and the main process when
``num_workers=0``) keeps a pure-Python log of ``time.time_ns()`` spans (the clock Kineto's
``baseTimeNanoseconds`` is on) and appends it to ``<spans_dir>/<pid>.spans`` once per batch with one
``os.write``: a killed worker loses at most the batch it was working on.

How the probe gets in, without a change to the user's code (:func:`install`):

* ``DataLoader.__init__`` is wrapped to remember the loader's settings as it really got them
  (:mod:`.settings`).
* ``DataLoader._get_iterator`` hands the new iterator a :class:`~.timing.TimedCollate` (the user's
  ``collate_fn`` plus a :class:`~.timing.LoaderContext`) and restores the user's ``collate_fn`` at once;
  the iterator passes it to every worker, pickled when the start method is spawn (:mod:`.patches`).
* ``torch.utils.data._utils.worker._worker_loop`` is replaced by :func:`.worker._probed_worker_loop`, a
  module-level function (so spawn can pickle it by name), which starts the worker's log and taps the
  worker's index queue to learn the index of the batch it is producing (:mod:`.worker`).
* The dataset fetchers' ``fetch`` and the tokenizer's public entry points are timed in place
  (:mod:`.timing`).

The records are described in :mod:`dlprof.capture.spanfile`.
"""

from __future__ import annotations

from dlprof.capture.probe.patches import (
    EVENT_BATCH,
    EVENT_EPOCH_END,
    EVENT_EPOCH_START,
    add_loader_callback,
    batches_ready,
    install,
    others_cpu_in_waits_ns,
    uninstall,
)
from dlprof.capture.probe.settings import EpochRecord, LoaderRecord, loader_records
from dlprof.capture.probe.timing import flush, in_worker

__all__ = [
    "EVENT_BATCH",
    "EVENT_EPOCH_END",
    "EVENT_EPOCH_START",
    "EpochRecord",
    "LoaderRecord",
    "add_loader_callback",
    "batches_ready",
    "flush",
    "in_worker",
    "install",
    "loader_records",
    "others_cpu_in_waits_ns",
    "uninstall",
]
