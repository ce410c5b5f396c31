"""The DataLoader probe in this process: spans per batch in the main process and in real workers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlprof import schema
from dlprof.capture import loader_probe, spanfile
from dlprof.workloads.lora import DEFAULT_TOKENIZER


class TokenizingDataset(Dataset):
    """Calls the tokenizer twice per sample, once through ``encode`` (which itself calls ``__call__``)."""

    def __init__(self, tokenizer, length: int = 12, fail_at: int = -1):
        self.tokenizer, self.length, self.fail_at = tokenizer, length, fail_at

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.fail_at:
            raise ValueError(f"bad sample {index}")
        ids = self.tokenizer(f"sample number {index}")["input_ids"]
        ids += self.tokenizer.encode(" and more text")
        return torch.tensor(ids[:4])


def pad_collate(samples):
    return torch.nn.utils.rnn.pad_sequence(samples, batch_first=True)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(DEFAULT_TOKENIZER))


@pytest.fixture
def spans_dir(tmp_path: Path):
    directory = tmp_path / "spans"
    loader_probe.install(str(directory))
    yield directory
    loader_probe.uninstall()


def spans_by_batch(directory: Path) -> dict[int, dict[str, list]]:
    loader_probe.flush()
    grouped: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for span in spanfile.read_span_files(directory).spans:
        grouped[span.batch][span.name].append(span)
    return grouped


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


def test_a_failing_sample_keeps_its_fetch_span_and_raises(spans_dir, tokenizer):
    loader = DataLoader(TokenizingDataset(tokenizer, fail_at=5), batch_size=2, collate_fn=pad_collate)
    with pytest.raises(ValueError, match="bad sample 5"):
        list(loader)
    grouped = spans_by_batch(spans_dir)
    assert schema.SPAN_BATCH not in grouped[2] and len(grouped[2][schema.SPAN_FETCH]) == 1


def test_loader_settings_are_recorded_as_the_dataloader_got_them(spans_dir):
    DataLoader(
        TensorDataset(torch.arange(4.0)), batch_size=2, num_workers=3, pin_memory=False, multiprocessing_context="spawn"
    )
    (record,) = loader_probe.loader_records()
    assert record.config["num_workers"] == 3
    assert record.config["prefetch_factor"] == 2  # PyTorch's default, filled in by the DataLoader
    assert record.config["start_method"] == "spawn"
    assert record.config["dataset_len"] == 4


def test_tokenizer_outside_a_loader_is_not_recorded(spans_dir, tokenizer):
    tokenizer("not loading data")
    assert spanfile.read_span_files(spans_dir).spans == []


def test_uninstall_restores_torch(tmp_path):
    from torch.utils.data._utils import fetch, worker

    before = (DataLoader.__init__, fetch._MapDatasetFetcher.fetch, worker._worker_loop)
    loader_probe.install(str(tmp_path))
    assert DataLoader.__init__ is not before[0]
    loader_probe.uninstall()
    assert (DataLoader.__init__, fetch._MapDatasetFetcher.fetch, worker._worker_loop) == before


class Counting(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(5))


def test_iterable_dataset_end_leaves_no_span(spans_dir):
    # 5 samples in batches of 2: 3 batches, then the exhausted iterator raises StopIteration in a fetch
    assert len(list(DataLoader(Counting(), batch_size=2))) == 3
    grouped = spans_by_batch(spans_dir)
    assert sorted(grouped) == [0, 1, 2]
    assert all(len(spans[schema.SPAN_FETCH]) == 1 for spans in grouped.values())
