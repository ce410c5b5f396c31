"""The probed worker loop: spans from real worker processes, forked and spawned, persistent or not."""

from __future__ import annotations

import pickle

import torch
from torch.utils.data import DataLoader, TensorDataset

from dlprof.capture import spanfile
from dlprof.capture.probe import worker
from dlprof.core import schema

from .conftest import TokenizingDataset, pad_collate, spans_by_batch


def test_forked_workers_record_their_batches_with_worker_ids(spans_dir, tokenizer):
    loader = DataLoader(
        TokenizingDataset(tokenizer),
        batch_size=2,
        num_workers=2,
        collate_fn=pad_collate,
        multiprocessing_context="fork",
    )
    assert len(list(loader)) == 6
    found = spanfile.read_span_files(spans_dir)
    workers = {w.worker_id: w.pid for w in found.workers}
    assert sorted(workers) == [0, 1] and len(set(workers.values())) == 2
    grouped = spans_by_batch(spans_dir)
    assert sorted(grouped) == list(range(6))
    for batch, spans in grouped.items():
        (whole,) = spans[schema.SPAN_BATCH]
        assert whole.worker_id == batch % 2  # in-order loaders hand batches out round-robin
        assert whole.pid == workers[whole.worker_id]
        assert len(spans[schema.SPAN_TOKENIZER]) == 2 * 2
    ends = {b: s[schema.SPAN_BATCH][0].end_ns for b, s in grouped.items()}
    assert all(ends[c.batch] <= c.end_ns for c in found.next_calls)


def test_the_worker_loop_pickles_by_name():
    # spawn pickles the DataLoader's worker target by name: it must be a module-level function
    assert pickle.loads(pickle.dumps(worker._probed_worker_loop)) is worker._probed_worker_loop
    assert worker._probed_worker_loop.__module__ == "dlprof.capture.probe.worker"


def test_spawned_worker_gets_the_probe_by_pickling(spans_dir):
    data = TensorDataset(torch.arange(8.0))
    loader = DataLoader(data, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    assert len(list(loader)) == 2
    grouped = spans_by_batch(spans_dir)
    assert sorted(grouped) == [0, 1]
    assert {s.worker_id for spans in grouped.values() for s in spans[schema.SPAN_BATCH]} == {0}


def test_persistent_workers_count_epochs(spans_dir):
    loader = DataLoader(
        TensorDataset(torch.arange(4.0)),
        batch_size=2,
        num_workers=1,
        persistent_workers=True,
        multiprocessing_context="fork",
    )
    for _ in range(2):
        assert len(list(loader)) == 2
    del loader
    found = spanfile.read_span_files(spans_dir)
    assert len(found.workers) == 1  # one worker served both epochs
    assert sorted({(s.epoch, s.batch) for s in found.spans}) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sorted((c.epoch, c.batch) for c in found.next_calls) == [(0, 0), (0, 1), (1, 0), (1, 1)]
