"""Span timing in one process: the batch, fetch, collate and tokenizer spans of a DataLoader without workers."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from dlprof.capture import spanfile
from dlprof.capture.probe import timing
from dlprof.core import schema

from .conftest import TokenizingDataset, pad_collate, spans_by_batch


def test_num_workers_0_records_each_batch_in_the_main_process(spans_dir, tokenizer):
    loader = DataLoader(TokenizingDataset(tokenizer), batch_size=3, collate_fn=pad_collate)
    batches = list(loader)
    grouped = spans_by_batch(spans_dir)
    assert sorted(grouped) == [0, 1, 2, 3] and len(batches) == 4
    for spans in grouped.values():
        (whole,), (fetch,), (collate,) = spans[schema.SPAN_BATCH], spans[schema.SPAN_FETCH], spans[schema.SPAN_COLLATE]
        # one span per tokenizer call: encode() calling __call__ inside counts once
        assert len(spans[schema.SPAN_TOKENIZER]) == 2 * 3
        assert {s.worker_id for s in (whole, fetch, collate)} == {-1}
        assert whole.start_ns == fetch.start_ns <= fetch.end_ns <= collate.start_ns <= collate.end_ns <= whole.end_ns
        assert all(fetch.start_ns <= t.start_ns <= t.end_ns <= fetch.end_ns for t in spans[schema.SPAN_TOKENIZER])
        assert fetch.cpu_ns >= 0 and collate.cpu_ns <= collate.end_ns - collate.start_ns + 1_000_000
    calls = spanfile.read_span_files(spans_dir).next_calls
    assert [c.batch for c in calls] == [0, 1, 2, 3]
    # each batch was produced inside the __next__ call that returned it
    for call in calls:
        whole = grouped[call.batch][schema.SPAN_BATCH][0]
        assert call.start_ns <= whole.start_ns and whole.end_ns <= call.end_ns


def test_a_failing_sample_keeps_its_fetch_span_and_raises(spans_dir, tokenizer):
    loader = DataLoader(TokenizingDataset(tokenizer, fail_at=5), batch_size=2, collate_fn=pad_collate)
    with pytest.raises(ValueError, match="bad sample 5"):
        list(loader)
    grouped = spans_by_batch(spans_dir)
    assert schema.SPAN_BATCH not in grouped[2] and len(grouped[2][schema.SPAN_FETCH]) == 1


def test_tokenizer_outside_a_loader_is_not_recorded(spans_dir, tokenizer):
    tokenizer("not loading data")
    assert spanfile.read_span_files(spans_dir).spans == []


class Counting(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(5))


def test_iterable_dataset_end_leaves_no_span(spans_dir):
    # 5 samples in batches of 2: 3 batches, then the exhausted iterator raises StopIteration in a fetch
    assert len(list(DataLoader(Counting(), batch_size=2))) == 3
    grouped = spans_by_batch(spans_dir)
    assert sorted(grouped) == [0, 1, 2]
    assert all(len(spans[schema.SPAN_FETCH]) == 1 for spans in grouped.values())


def test_collate_spans_count_the_batch_tensors(spans_dir):
    def to_dict(samples):
        return {"ids": torch.stack(samples), "extra": [torch.zeros(1), (torch.ones(1), "text")], "n": len(samples)}

    list(DataLoader(torch.arange(4.0), batch_size=2, collate_fn=to_dict))
    collates = [s for s in spanfile.read_span_files(spans_dir).spans if s.name == schema.SPAN_COLLATE]
    assert [s.extra for s in collates] == [3, 3]


def test_count_tensors_stops_at_depth_4():
    nested = torch.zeros(1)
    for _ in range(4):
        nested = [nested]
    assert timing.count_tensors(nested) == 1
    assert timing.count_tensors([nested]) == 0  # five levels down: not looked at


def test_timed_collate_travels_to_spawned_workers_by_pickling():
    ctx = timing.LoaderContext("/spans", loader_id=2, epoch=5)
    copy = pickle.loads(pickle.dumps(timing.TimedCollate(pad_collate, ctx)))
    assert copy.collate_fn is pad_collate and copy.ctx == ctx
    # without an installed probe (no span log) it is the user's collate_fn, untimed
    assert copy([torch.ones(2), torch.ones(1)]).tolist() == [[1.0, 1.0], [1.0, 0.0]]
