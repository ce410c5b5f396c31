"""The DataLoader probe installed in this process, and data sets that exercise it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from dlprof.capture import probe, spanfile
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


def spans_by_batch(directory: Path) -> dict[int, dict[str, list]]:
    probe.flush()
    grouped: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for span in spanfile.read_span_files(directory).spans:
        grouped[span.batch][span.name].append(span)
    return grouped


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(DEFAULT_TOKENIZER))


@pytest.fixture
def spans_dir(tmp_path: Path):
    directory = tmp_path / "spans"
    probe.install(str(directory))
    yield directory
    probe.uninstall()
