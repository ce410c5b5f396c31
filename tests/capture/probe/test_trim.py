"""Batches trimmed to their longest real sequence (the trials' padding segment): only positions the loss ignores are
dropped, so the loss is the same; batches that cannot be trimmed so are handed over whole, with the reason kept."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from dlprof.capture import probe
from dlprof.capture.probe import trim
from dlprof.capture.probe.trim import IGNORE_INDEX, TrimCheck

LENGTHS = (3, 5, 7, 2)
WIDTH = 16


def _padded(lengths=LENGTHS, width=WIDTH, vocab=64) -> dict:
    """A batch padded on the right to ``width``: token ids, labels ignored and the mask 0 on the padding."""
    generator = torch.Generator().manual_seed(sum(lengths))
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    labels = torch.full((len(lengths), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, vocab, (n,), generator=generator)
        labels[row, :n] = ids[row, :n]
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_a_right_padded_batch_is_cut_to_its_longest_sequence_as_views():
    batch = _padded()
    out = trim.trimmed(batch)
    assert {name: tuple(t.shape) for name, t in out.items()} == dict.fromkeys(batch, (4, 7))
    assert batch["input_ids"].shape == (4, WIDTH)  # the loader's batch is untouched
    assert out["input_ids"].data_ptr() == batch["input_ids"].data_ptr()  # a view, not a copy
    assert torch.equal(out["labels"], batch["labels"][:, :7])


def test_the_causal_lm_loss_is_the_same_trimmed():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = Qwen2ForCausalLM(config).eval()
    batch = _padded()
    with torch.no_grad():
        padded = model(**batch).loss
        trimmed = model(**trim.trimmed(batch)).loss
    assert torch.isfinite(padded)
    assert torch.allclose(padded, trimmed, rtol=1e-5, atol=1e-6), (padded.item(), trimmed.item())


def test_a_batch_encoding_stays_a_batch_encoding():
    from transformers import BatchEncoding

    batch = BatchEncoding(_padded())
    out = trim.trimmed(batch)
    assert type(out) is BatchEncoding and out["input_ids"].shape == (4, 7)
    assert batch["input_ids"].shape == (4, WIDTH)


def test_labels_one_per_row_let_the_mask_alone_decide():
    batch = _padded()
    batch["labels"] = torch.tensor([0, 1, 0, 1])
    out = trim.trimmed(batch)
    assert out["input_ids"].shape == (4, 7) and torch.equal(out["labels"], batch["labels"])


def _without(name):
    batch = _padded()
    del batch[name]
    return batch


def _counting_padding():
    batch = _padded()
    batch["labels"][0, 10] = 5  # the loss would count a padded position
    return batch


def _odd_tensor():
    batch = _padded()
    batch["pairwise"] = torch.zeros((4, WIDTH, WIDTH))
    return batch


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: tuple(_padded().values()), "the batches are tuple, not a mapping of named tensors"),
        (lambda: _without("attention_mask"), "no attention_mask"),
        (lambda: _without("labels"), "no labels: the loss your script computes may count the padded positions"),
        (_counting_padding, "the labels count padded positions (not -100 there): dropping them would change the loss"),
        (_odd_tensor, "pairwise has their width in another dimension"),
    ],
)
def test_a_batch_that_cannot_be_trimmed_keeping_the_loss_is_handed_over_whole(make, reason):
    batch = make()
    assert trim.trimmed(batch) is batch
    found = TrimCheck()
    trim.check(batch, found)
    assert found.batches == 1 and found.positions == 0 and found.droppable_pct == 0.0
    assert reason in found.refused


def test_a_batch_padded_to_its_longest_has_nothing_to_drop():
    batch = _padded(width=max(LENGTHS))
    assert trim.trimmed(batch) is batch
    found = TrimCheck()
    trim.check(batch, found)
    assert (found.positions, found.droppable, found.refused) == (4 * 7, 0, None)


def test_the_check_counts_the_positions_trimming_drops():
    found = TrimCheck()
    trim.check(_padded(), found)  # 4 x 16 positions, 4 x 9 past the longest (7)
    trim.check(_padded((2, 4), width=8), found)  # 2 x 8, 2 x 4
    assert (found.batches, found.positions, found.droppable) == (2, 64 + 16, 36 + 8)
    assert found.droppable_pct == pytest.approx(100 * 44 / 80)


class _Samples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 500

    def __getitem__(self, index: int) -> int:
        return 2 + index % 5


def _collate(lengths: list[int]) -> dict:
    return _padded(tuple(lengths), width=WIDTH)


@pytest.fixture
def installed(tmp_path):
    probe.install(str(tmp_path / "spans"))
    yield
    probe.uninstall()


def test_the_probe_checks_the_first_batches_and_trims_while_asked(installed):
    loader = DataLoader(_Samples(), batch_size=5, collate_fn=_collate)
    record = probe.loader_records()[0]
    widths = []
    for i, batch in enumerate(loader):
        widths.append(batch["input_ids"].shape[1])
        if i == 4:  # from the next batch on
            trim.TRIMMING.add(record.loader_id)
        if i == 9:
            trim.TRIMMING.discard(record.loader_id)
    assert widths[:5] == [WIDTH] * 5 and widths[10:] == [WIDTH] * (len(widths) - 10)
    assert set(widths[5:10]) == {6}  # every batch holds samples of 2, 3, 4, 5 and 6 tokens
    # Only the first CHECKED_BATCHES batches are checked (the trimmed ones are not counted).
    assert record.trim.batches == trim.CHECKED_BATCHES and record.trim.refused is None
    assert record.trim.droppable_pct == pytest.approx(100 * (WIDTH - 6) / WIDTH)


def test_the_trials_padding_segment_trims_from_its_first_step_to_the_plans_end(installed):
    from dlprof.capture.trial_plan import Plan, PlannedSegment
    from dlprof.capture.trials import TrialRunner
    from dlprof.results.record import TrialRequest

    loader = DataLoader(_Samples(), batch_size=5, collate_fn=_collate)
    record = probe.loader_records()[0]
    tried = PlannedSegment(
        num_workers=0, persistent_workers=False, prefetch_factor=None, round=0, request_step=3, first_step=3, steps=5
    )
    padding = PlannedSegment(
        num_workers=0,
        persistent_workers=False,
        prefetch_factor=None,
        round=0,
        request_step=8,
        first_step=8,
        steps=6,
        trim_padding=True,
    )
    plan = Plan(trials_start=3, stop_step=14, decided_at=3, decided_by=0, trial_steps=1, segments=(tried, padding))
    step = [0]
    runner = TrialRunner(plan, TrialRequest(counts=(0,), rounds=1), record, lambda: step[0])
    widths = []
    for batch in loader:
        widths.append(batch["input_ids"].shape[1])
        step[0] += 1
        if step[0] >= plan.stop_step:
            runner.finish()
            break
        runner.at_boundary(step[0])
    assert widths == [WIDTH] * 8 + [6] * 6
    assert not trim.TRIMMING  # finished: the loader's batches are whole again
    manifest = runner.manifest(steps_run=14)
    assert [(s.first_step, s.steps, s.trim_padding) for s in manifest.segments] == [(3, 5, False), (8, 6, True)]
    assert (manifest.trim_checked, manifest.trim_refused) == (8, None)
    assert manifest.trimmable_pct == pytest.approx(100 * (WIDTH - 6) / WIDTH)
    assert manifest.incomplete is None
