"""The built-in workload's options, step plan, and data path (tokenizer, dataset, collator) in-process."""

from __future__ import annotations

import pytest
import torch

from dlprof.core.errors import UsageError
from dlprof.workloads.lora import DEFAULT_DATASET, WorkloadOptions, load_tokenizer, parse_args, plan
from dlprof.workloads.records import load_examples

CLI_DEFAULTS = {  # what `dlprof record` passes to plan() when no workload option is given
    "model": None,
    "dataset": None,
    "tokenizer": None,
    "batch_size": 4,
    "max_length": 512,
    "steps": None,
    "num_workers": 2,
    "pin_memory": None,
    "prefetch_factor": None,
    "persistent_workers": False,
    "device": "auto",
    "seed": 0,
}


@pytest.mark.parametrize(
    "options",
    [
        WorkloadOptions(),
        WorkloadOptions(
            model="m",
            dataset="d.json",
            tokenizer="t.json",
            batch_size=8,
            max_length=64,
            steps=7,
            num_workers=3,
            pin_memory=True,
            prefetch_factor=4,
            persistent_workers=True,
            device="cpu",
            seed=5,
        ),
        WorkloadOptions(pin_memory=False, num_workers=0),
        WorkloadOptions(pin_memory=None, prefetch_factor=1),
    ],
    ids=["defaults", "everything-set", "pin-false", "pin-none"],
)
def test_argv_round_trip(options):
    assert parse_args(options.to_argv()) == options


def test_to_argv_spells_booleans():
    argv = WorkloadOptions(pin_memory=False, persistent_workers=True).to_argv()
    assert "--no-pin-memory" in argv and "--persistent-workers" in argv
    assert "--pin-memory" not in WorkloadOptions().to_argv() and "--model" not in WorkloadOptions().to_argv()


@pytest.mark.parametrize(
    ("steps", "active", "expected_steps", "expected_active"),
    # Without --steps: the window, then enough for three more epochs (214 examples / 4 = 54 steps: one to reach a
    # boundary, two timed whole to make 100 batches) and 5 settling steps.
    [(None, None, 25 + 3 * 54 + 5, 20), (30, None, 30, 25), (None, 5, 10 + 3 * 54 + 5, 5), (6, None, 6, 1)],
)
def test_plan_fits_steps_and_active(steps, active, expected_steps, expected_active):
    options, planned_active = plan({**CLI_DEFAULTS, "steps": steps}, 2, 3, active)
    assert (options.steps, planned_active) == (expected_steps, expected_active)


def test_plan_leaves_room_for_reference_steps():
    options, active = plan({**CLI_DEFAULTS, "steps": 40}, 2, 3, None, reference_steps=10)
    assert (options.steps, active) == (40, 25)
    with pytest.raises(UsageError, match=r"--steps 14: .* use --steps 16 or more"):
        plan({**CLI_DEFAULTS, "steps": 14}, 2, 3, None, reference_steps=10)


def test_plan_rejects_too_few_steps():
    with pytest.raises(UsageError, match=r"--steps 5: .* use --steps 6 or more"):
        plan({**CLI_DEFAULTS, "steps": 5}, 2, 3, None)


def test_data_path_tokenizes_masks_and_pads():
    from dlprof.workloads.sft import IGNORE_INDEX, PadCollator, SupervisedDataset

    tokenizer = load_tokenizer(WorkloadOptions())
    assert tokenizer.pad_token_id is not None and tokenizer("hello")["input_ids"]
    examples = load_examples(DEFAULT_DATASET)[:4]
    dataset = SupervisedDataset(examples, tokenizer, max_length=512)
    items = [dataset[i] for i in range(len(dataset))]
    for item in items:
        ids, labels = item["input_ids"], item["labels"]
        assert len(ids) == len(labels) <= 512
        masked = labels.count(IGNORE_INDEX)
        assert 0 < masked < len(labels) and labels[:masked] == [IGNORE_INDEX] * masked
        assert labels[masked:] == ids[masked:]  # the response is trained on as is
    short = SupervisedDataset(examples, tokenizer, max_length=16)[0]
    assert len(short["input_ids"]) == len(short["labels"]) == 16

    batch = PadCollator(tokenizer.pad_token_id)(items[:2] + [{"input_ids": [1, 2], "labels": [IGNORE_INDEX, 2]}])
    longest = max(len(i["input_ids"]) for i in items[:2])
    assert {k: tuple(v.shape) for k, v in batch.items()} == dict.fromkeys(
        ("input_ids", "labels", "attention_mask"), (3, longest)
    )
    assert batch["attention_mask"][2].tolist() == [1, 1] + [0] * (longest - 2)
    assert batch["labels"][2].tolist() == [IGNORE_INDEX, 2] + [IGNORE_INDEX] * (longest - 2)
    assert batch["input_ids"][2].tolist() == [1, 2] + [tokenizer.pad_token_id] * (longest - 2)
    for row, item in enumerate(items[:2]):
        n = len(item["input_ids"])
        assert batch["input_ids"][row, :n].tolist() == item["input_ids"]
        assert batch["attention_mask"][row].sum().item() == n
    # --pad-to-max-length: every batch as wide as max_length, the padding masked and ignored alike.
    fixed = PadCollator(tokenizer.pad_token_id, 512)(items[:2])
    assert {tuple(v.shape) for v in fixed.values()} == {(2, 512)}
    assert torch.equal(fixed["input_ids"][:, :longest], batch["input_ids"][:2])
    assert fixed["attention_mask"][:, longest:].sum().item() == 0
    assert set(fixed["labels"][:, longest:].unique().tolist()) == {IGNORE_INDEX}
