"""What the fault scripts share: the package's shipped tokenizer and examples (offline), a tiny language model and a
plain training loop (one optimizer step per batch, epoch after epoch, until ``steps``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network

IGNORE_INDEX = -100
#: The built-in workload's data, read from the checkout (a script run by ``dlprof record`` need not import dlprof).
WORKLOAD_DATA = Path(__file__).resolve().parents[3] / "dlprof" / "workloads" / "data"
TOKENIZER_FILE = WORKLOAD_DATA / "tokenizer.json"


def load_tokenizer():
    """The byte-level BPE tokenizer the built-in workload ships, as a transformers fast tokenizer."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_FILE), pad_token="<|endoftext|>")


def texts(repeat: int = 1) -> list[str]:
    """The bundled instruction/response examples as plain strings (prompt and response), ``repeat`` times over (an
    epoch of more than a few hundred batches, so that ``dlprof record`` times a few dozen steps after its window
    rather than whole short epochs)."""
    records = json.loads((WORKLOAD_DATA / "self_cognition.json").read_text())
    return [f"{r['instruction']}\n{r['output']}" for r in records] * repeat


class Tokenized(Dataset):
    """The examples, tokenized once (``repeat`` times over)."""

    def __init__(self, tokenizer, max_length: int, repeat: int = 1):
        self.ids = [tokenizer(text)["input_ids"][:max_length] for text in texts()] * repeat

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return self.ids[index]


class Pad:
    """Pads a batch to ``width`` positions (None: its longest sample), labels -100 and attention mask 0 on padding."""

    def __init__(self, pad_id: int, width):
        self.pad_id, self.width = pad_id, width

    def __call__(self, samples):
        width = self.width or max(len(ids) for ids in samples)
        input_ids = torch.full((len(samples), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(samples), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
        for row, ids in enumerate(samples):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


class TinyLM(torch.nn.Module):
    """Embedding, one hidden layer and a head: its cost grows with the positions it is given. It predicts the next
    token's id modulo ``HEAD_CLASSES``, so that a step takes milliseconds on two busy cores, not a full vocabulary's
    softmax."""

    HEAD_CLASSES = 64

    def __init__(self, vocab: int, hidden: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.hidden = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(hidden, self.HEAD_CLASSES)

    def forward(self, input_ids, labels, attention_mask=None):
        logits = self.head(torch.relu(self.hidden(self.embed(input_ids))))
        targets = torch.where(labels == IGNORE_INDEX, labels, labels % self.HEAD_CLASSES)
        return torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, self.HEAD_CLASSES), targets[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
        )


def train(loader, model: torch.nn.Module, steps: int, loss_of=None, seconds: float | None = None) -> int:
    """Train ``steps`` optimizer steps over ``loader``'s epochs, or for ``seconds`` if that comes first (a run long
    enough for a sampler that reads every few seconds, however fast the machine); ``loss_of(model, batch)`` gives a
    batch's loss (default: the model called with the batch's keys). Returns the steps run."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_of = loss_of or (lambda m, batch: m(**batch))
    end = None if seconds is None else time.monotonic() + seconds
    step = 0
    while step < steps and (end is None or time.monotonic() < end):
        for batch in loader:
            loss_of(model, batch).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step >= steps or (end is not None and time.monotonic() >= end):
                break
    print(f"trained {step} steps")
    return step
