"""What the probe measures of each collated batch: tokens and padding, bytes, fingerprint; its records and the
manifest's ``batches`` made of them."""

from __future__ import annotations

import functools
from collections import UserDict
from collections.abc import Mapping

import pytest
import torch
from torch.utils.data import DataLoader

from dlprof.capture import probe, spanfile
from dlprof.capture.merge import batch_facts as merged_batch_facts
from dlprof.capture.probe import timing
from dlprof.capture.probe.batch_facts import (
    SOURCE_LABELS,
    SOURCE_MASK,
    SOURCE_NONE,
    SOURCE_PAD_ID,
    measure,
    pad_token_id,
)
from dlprof.core import schema

PAD = 0
#: Two sequences of 3 and 5 tokens.
SEQUENCES = ([11, 12, 13], [21, 22, 23, 24, 25])


def padded(width: int, sequences=SEQUENCES, pad: int = PAD) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask and labels of ``sequences`` padded to ``width`` on the right."""
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, tokens in enumerate(sequences):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
        labels[row, : len(tokens)] = torch.tensor(tokens)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_attention_mask_counts_real_tokens_of_a_batch_padded_to_a_fixed_length():
    facts = measure(padded(16))
    assert facts.source == SOURCE_MASK
    assert (facts.rows, facts.width, facts.real_tokens, facts.longest) == (2, 16, 8, 5)
    assert facts.nbytes == 3 * 2 * 16 * 8 and facts.tensors == 3


def test_a_batch_padded_to_its_longest_has_its_width_as_longest():
    facts = measure(padded(5))
    assert (facts.rows, facts.width, facts.real_tokens, facts.longest) == (2, 5, 8, 5)


def test_a_bool_mask_and_left_padding_count_alike():
    batch = padded(8)
    left = {"input_ids": batch["input_ids"].flip(1), "attention_mask": batch["attention_mask"].flip(1).bool()}
    facts = measure(left)
    assert (facts.source, facts.real_tokens, facts.longest) == (SOURCE_MASK, 8, 5)


def test_labels_alone_count_up_to_the_last_labelled_position():
    batch = padded(10)
    labels = batch["labels"].clone()
    labels[0, :2] = -100  # an ignored prompt is real tokens all the same
    labels[1, 2] = -100  # and so is an ignored token inside the answer
    facts = measure({"input_ids": batch["input_ids"], "labels": labels})
    assert (facts.source, facts.rows, facts.width, facts.real_tokens, facts.longest) == (SOURCE_LABELS, 2, 10, 8, 5)


def test_a_row_without_labels_has_no_real_tokens_by_labels():
    ids = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    labels = torch.tensor([[-100, -100, -100, -100], [-100, 5, -100, -100]])
    facts = measure({"input_ids": ids, "labels": labels})
    assert (facts.source, facts.real_tokens, facts.longest) == (SOURCE_LABELS, 2, 2)


def test_the_pad_id_counts_when_nothing_else_tells():
    ids = padded(12, pad=7)["input_ids"]
    facts = measure({"input_ids": ids}, pad_id=7)
    assert (facts.source, facts.rows, facts.width, facts.real_tokens, facts.longest) == (SOURCE_PAD_ID, 2, 12, 8, 5)
    # without a pad id every position counts
    facts = measure({"input_ids": ids})
    assert (facts.source, facts.real_tokens, facts.longest) == (SOURCE_NONE, 24, 12)


def test_mask_or_labels_of_another_shape_are_not_used():
    batch = padded(6)
    facts = measure({"input_ids": batch["input_ids"], "attention_mask": torch.ones(2, 1, 6, 6)}, pad_id=PAD)
    assert (facts.source, facts.real_tokens) == (SOURCE_PAD_ID, 8)


def test_the_token_tensor_is_found_in_mappings_and_sequences():
    batch = padded(6)
    # a Mapping that is not a dict (transformers' BatchEncoding is a UserDict)
    assert measure(UserDict(batch)).source == SOURCE_MASK
    # without an input_ids key: the first 2-D integer tensor, its mask beside it
    renamed = {"pixels": torch.rand(2, 6), "tokens": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    facts = measure({"inputs": renamed})
    assert (facts.source, facts.rows, facts.width, facts.real_tokens, facts.tensors) == (SOURCE_MASK, 2, 6, 8, 3)
    # a tuple: no mask to go with it
    facts = measure((torch.arange(3.0), batch["input_ids"]), pad_id=PAD)
    assert (facts.source, facts.rows, facts.real_tokens) == (SOURCE_PAD_ID, 2, 8)


def test_a_batch_without_token_tensor_is_measured_in_bytes():
    images = {"pixel_values": torch.rand(4, 3, 8, 8), "labels": torch.arange(4)}
    facts = measure(images)
    assert (facts.source, facts.rows, facts.width, facts.real_tokens, facts.longest) == (SOURCE_NONE, 0, 0, 0, 0)
    assert facts.nbytes == 4 * 3 * 8 * 8 * 4 + 4 * 8 and facts.fingerprint != 0 and facts.tensors == 2
    assert measure(["text", 3]) == (SOURCE_NONE, 0, 0, 0, 0, 0, 0, 0)


def test_a_storage_shared_by_two_tensors_counts_once():
    ids = torch.arange(12).reshape(2, 6)
    assert measure({"input_ids": ids, "labels": ids}).nbytes == 12 * 8


def _texts(seed: int, prefix: list[int]) -> list[list[int]]:
    """Two samples behind one chat template: equal first tokens, then their own."""
    generator = torch.Generator().manual_seed(seed)
    return [prefix + torch.randint(3, 30000, (n,), generator=generator).tolist() for n in (300, 170)]


def test_equal_batches_have_equal_fingerprints_and_different_ones_differ():
    def fingerprint(batch) -> int:
        return measure(batch).fingerprint

    template = list(range(100, 160))
    one = fingerprint(padded(2048, sequences=_texts(1, template)))
    assert one == fingerprint(padded(2048, sequences=_texts(1, template)))  # made again, equal bytes
    assert one != fingerprint(padded(2048, sequences=_texts(2, template)))  # other samples behind the same template
    assert one != fingerprint(padded(2047, sequences=_texts(1, template)))
    images = torch.rand(8, 3, 32, 32)
    assert fingerprint({"x": images}) == fingerprint({"x": images.clone()})
    assert fingerprint({"x": images}) != fingerprint({"x": torch.rand(8, 3, 32, 32)})
    # a permuted layout is read in memory order, a dtype numpy lacks as bytes
    assert fingerprint({"x": images.to(memory_format=torch.channels_last)}) not in (0, fingerprint({"x": images}))
    assert fingerprint({"x": images.bfloat16()}) != 0
    # a strided slice is not copied to be read
    assert fingerprint({"x": images[:, :, ::2]}) == 0


def test_tensors_out_of_reach_leave_the_fingerprint_unknown():
    facts = measure({"input_ids": torch.zeros(2, 3, dtype=torch.long, device="meta")})
    assert facts.fingerprint == 0 and facts.rows == 2


class _Tokenizer:
    pad_token_id = 3


class _HfCollator:
    def __init__(self):
        self.tokenizer = _Tokenizer()


class _OwnPad:
    pad_token_id = 5


def _collate(samples, tokenizer=None, pad_token_id=None):
    return samples


def test_the_pad_id_comes_from_the_collate_fns_tokenizer():
    assert pad_token_id(_HfCollator()) == 3
    assert pad_token_id(_OwnPad()) == 5
    assert pad_token_id(functools.partial(_collate, tokenizer=_Tokenizer())) == 3
    assert pad_token_id(functools.partial(_collate, pad_token_id=9)) == 9
    assert pad_token_id(_collate) is None

    class Raising:
        def __getattr__(self, name):
            raise RuntimeError("no")

    assert pad_token_id(Raising()) is None


def _records(spans_dir):
    probe.flush()
    return spanfile.read_span_files(spans_dir)


class _Collator:
    """Pads to the longest sample; says its pad id the way the built-in workload's collator does."""

    pad_token_id = PAD

    def __call__(self, samples):
        return padded(max(len(s) for s in samples), sequences=samples)


def test_each_collated_batch_is_recorded_beside_its_spans(spans_dir):
    samples = [[1, 2], [3, 4, 5, 6], [7], [8, 9, 10]]
    list(DataLoader(samples, batch_size=2, collate_fn=_Collator()))
    found = _records(spans_dir)
    assert found.skipped_records == 0 and found.batches_unmeasured == 0
    collates = {s.batch: s for s in found.spans if s.name == schema.SPAN_COLLATE}
    assert [(b.batch, b.rows, b.width, b.real_tokens, b.longest) for b in found.batches] == [
        (0, 2, 4, 6, 4),
        (1, 2, 3, 4, 3),
    ]
    for record in found.batches:
        assert (record.loader_id, record.epoch, record.worker_id) == (collates[record.batch].loader_id, 0, -1)
        assert record.made_ns == collates[record.batch].end_ns and record.check_ns > 0
        assert record.padding_source == "attention_mask" and len(record.fingerprint) == 16
        assert record.nbytes == 3 * record.rows * record.width * 8
        assert collates[record.batch].extra == 3  # the collate span's tensor count comes from the same walk


def test_forked_workers_record_their_batches(spans_dir):
    samples = [[i + 1] * (1 + i % 3) for i in range(8)]
    loader = DataLoader(samples, batch_size=2, num_workers=2, collate_fn=_Collator(), multiprocessing_context="fork")
    assert len(list(loader)) == 4
    found = _records(spans_dir)
    assert sorted((b.batch, b.worker_id) for b in found.batches) == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert {b.pid for b in found.batches} == {w.pid for w in found.workers}


class _Exploding(Mapping):
    def __getitem__(self, key):
        raise KeyError(key)

    def __iter__(self):
        raise RuntimeError("cannot be walked")

    def __len__(self):
        return 1


def test_a_batch_that_cannot_be_measured_is_counted_and_training_goes_on(spans_dir):
    def collate(samples):
        return _Exploding()

    assert len(list(DataLoader(range(4), batch_size=2, collate_fn=collate))) == 2
    found = _records(spans_dir)
    assert found.batches == [] and found.batches_unmeasured == 2
    assert [s.extra for s in found.spans if s.name == schema.SPAN_COLLATE] == [0, 0]
    assert merged_batch_facts(found).unmeasured == 2


def test_a_failing_collate_fn_records_no_facts(spans_dir):
    def collate(samples):
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        list(DataLoader(range(4), batch_size=2, collate_fn=collate))
    found = _records(spans_dir)
    assert found.batches == [] and found.batches_unmeasured == 0 and timing.STATE.collated is None


def _pair(batch: int, made_ns: int, source: int = 1, worker: int = 0, fingerprint: int = 0x1234) -> list[tuple]:
    where = (0, 0, batch, worker)
    return [
        (spanfile.KIND_BATCH_TOKENS, source, 6, 2, 4, 4, *where),
        (spanfile.KIND_BATCH_BYTES, 0, fingerprint, 192, made_ns, 5_000, *where),
    ]


def _write(path, records: list[tuple], cut: int = 0) -> None:
    data = b"".join(spanfile.RECORD.pack(*r) for r in records)
    path.write_bytes(data[: len(data) - cut])


def test_records_round_trip_and_broken_pairs_are_skipped(tmp_path):
    records = _pair(0, 300) + _pair(1, 100, source=0, fingerprint=-1)
    records += _pair(2, 200)[:1]  # a tokens record without its bytes record
    records += _pair(3, 400, worker=1)[1:]  # a bytes record without its tokens record
    records += [(spanfile.KIND_BATCH_TOKENS, spanfile.UNMEASURED, 0, 0, 0, 9_000, 0, 0, 4, 0)]
    records += _pair(5, 500)
    _write(tmp_path / "77.spans", records, cut=1)  # the last record cut short by a killed process
    found = spanfile.read_span_files(tmp_path)
    assert [(b.pid, b.batch, b.made_ns) for b in found.batches] == [(77, 0, 300), (77, 1, 100)]
    first, second = found.batches
    assert (first.rows, first.width, first.real_tokens, first.longest, first.nbytes) == (2, 4, 6, 4, 192)
    assert first.fingerprint == "0000000000001234" and second.fingerprint == "ffffffffffffffff"
    assert (first.padding_source, second.padding_source) == ("attention_mask", None)
    assert found.batches_unmeasured == 1
    # the tokens record alone, the bytes record alone, the cut tokens record of batch 5 and its bytes record
    assert found.skipped_records == 4


def test_merge_makes_batch_columns_in_the_order_batches_were_made(tmp_path):
    records = _pair(0, 300) + _pair(1, 100, source=0) + _pair(2, 200, worker=1, source=0)
    _write(tmp_path / "5.spans", records)
    _write(tmp_path / "6.spans", [(spanfile.KIND_BATCH_TOKENS, spanfile.UNMEASURED, 0, 0, 0, 2_000, 0, 0, 3, 1)])
    facts = merged_batch_facts(spanfile.read_span_files(tmp_path))
    assert facts.columns_agree() and len(facts) == 3
    assert facts.made_ns == (100, 200, 300) and facts.batch == (1, 2, 0) and facts.worker == (0, 1, 0)
    assert facts.rows == (2, 2, 2) and facts.nbytes == (192, 192, 192) and facts.fingerprint[0] == "0000000000001234"
    # a batch without a token tensor does not outvote those with one
    assert facts.padding_source == "attention_mask"
    assert facts.check_us == 5.0 and facts.unmeasured == 1
    assert merged_batch_facts(spanfile.SpanFiles()).check_us is None
