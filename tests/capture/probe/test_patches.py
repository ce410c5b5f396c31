"""Installing and removing the probe, and the loader events the main process reports."""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader

from dlprof.capture import probe


def test_uninstall_restores_torch(tmp_path):
    from torch.utils.data._utils import fetch, worker

    before = (DataLoader.__init__, fetch._MapDatasetFetcher.fetch, worker._worker_loop)
    probe.install(str(tmp_path))
    assert DataLoader.__init__ is not before[0]
    probe.uninstall()
    assert (DataLoader.__init__, fetch._MapDatasetFetcher.fetch, worker._worker_loop) == before


def test_uninstall_restores_every_patched_method(tmp_path, tokenizer):
    # the tokenizer fixture loads transformers: the probe then times the tokenizers too
    import torch.utils.data.dataloader as dataloader_module
    from torch.utils.data._utils import fetch, worker
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    patched = [
        (dataloader_module.DataLoader, "__init__"),
        (dataloader_module.DataLoader, "__iter__"),
        (dataloader_module.DataLoader, "_get_iterator"),
        (dataloader_module._BaseDataLoaderIter, "__next__"),
        (dataloader_module._SingleProcessDataLoaderIter, "_next_data"),
        (fetch._MapDatasetFetcher, "fetch"),
        (fetch._IterableDatasetFetcher, "fetch"),
        (PreTrainedTokenizerBase, "__call__"),
    ]
    before = [vars(owner)[name] for owner, name in patched] + [worker._worker_loop]
    probe.install(str(tmp_path))
    list(DataLoader(torch.arange(4.0), batch_size=2))  # the tokenizer patches go in here
    probe.install(str(tmp_path))  # a second install wraps nothing twice
    assert all(vars(owner)[name] is not method for (owner, name), method in zip(patched, before))
    assert all(vars(owner)[name]._dlprof_original is method for (owner, name), method in zip(patched, before))
    probe.uninstall()
    assert [vars(owner)[name] for owner, name in patched] + [worker._worker_loop] == before
    assert probe.loader_records() == [] and not probe.in_worker()


def test_loader_callbacks_hear_each_epoch_and_batch(spans_dir):
    heard = []
    probe.add_loader_callback(lambda event, ns: heard.append((event, ns >= 0)))
    loader = DataLoader(torch.arange(6.0), batch_size=2)
    for _ in range(2):
        list(loader)
    epoch = [probe.EVENT_EPOCH_START] + [probe.EVENT_BATCH] * 3 + [probe.EVENT_EPOCH_END]
    assert heard == [(event, True) for event in epoch * 2]
    (record,) = probe.loader_records()
    assert (record.iterations, record.batches, record.length) == (2, 6, 3)
    assert [e.as_manifest()["batches"] for e in record.epochs] == [3, 3]


def test_spans_false_records_only_settings_and_next_calls(tmp_path):
    from dlprof.capture import spanfile

    probe.install(str(tmp_path), spans=False)
    try:
        assert len(list(DataLoader(torch.arange(4.0), batch_size=2))) == 2
        probe.flush()
        found = spanfile.read_span_files(tmp_path)
        assert found.spans == [] and [c.batch for c in found.next_calls] == [0, 1]
        assert len(probe.loader_records()) == 1
    finally:
        probe.uninstall()


def test_the_batches_already_made_are_counted_at_each_next(spans_dir):
    ready = []
    probe.add_loader_callback(
        lambda event, ns: ready.append(probe.batches_ready()) if event == probe.EVENT_BATCH else 0
    )
    # Without workers nothing is made ahead.
    assert len(list(DataLoader(torch.arange(6.0), batch_size=2))) == 3
    assert ready == [0, 0, 0]
    ready.clear()
    # Two workers, 2 batches each in flight: given time, all 4 are made before the first is asked for.
    iterator = iter(DataLoader(torch.arange(16.0), batch_size=2, num_workers=2, prefetch_factor=2))
    deadline = time.monotonic() + 30
    while iterator._data_queue.qsize() < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    next(iterator)
    assert ready == [4]
    # Each batch taken asks for one more: after the next one is made, 4 are ready again (the one handed over included).
    deadline = time.monotonic() + 30
    while iterator._data_queue.qsize() < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    next(iterator)
    assert ready == [4, 4]
    rest = list(iterator)
    assert len(rest) == 6 and all(0 <= r <= 4 for r in ready[2:])
