"""Supervised fine-tuning data as the reference scenario has it: tokenize in ``__getitem__``, pad in ``collate_fn``.

Module-level classes, so that DataLoader workers started with ``spawn`` can unpickle them.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch.utils.data import Dataset

from dlprof.workloads.records import Example

#: Label of tokens the loss ignores (prompt and padding), as transformers' causal LM loss expects.
IGNORE_INDEX = -100
CHAT_START, CHAT_END = "<|im_start|>", "<|im_end|>"


def burn_cpu(ms: float) -> None:
    """Spin until this thread has used ``ms`` of CPU time (CPU time, not wall time: under contention it takes longer, as
    real work does)."""
    end = time.thread_time_ns() + int(ms * 1e6)
    while time.thread_time_ns() < end:
        pass


class _CostlyEncode:
    """Stands in for a tokenizer's ``_encode_plus`` (the method ``__call__`` encodes through): burns CPU time, then
    encodes.

    An instance attribute on the dataset's own copy of the tokenizer, so the cost is spent inside
    the tokenizer call (profilers count it as tokenizer time) and the caller's tokenizer is left alone.
    It holds the tokenizer it belongs to, which pickles (DataLoader workers started with spawn).
    """

    def __init__(self, tokenizer: Any, cost_ms: float):
        self.tokenizer, self.cost_ms = tokenizer, cost_ms

    def __call__(self, *args, **kwargs):
        burn_cpu(self.cost_ms)
        return type(self.tokenizer)._encode_plus(self.tokenizer, *args, **kwargs)


def chat_prompt(example: Example) -> str:
    """The prompt in ChatML, the format of Qwen models: system and user turns, then the assistant's header."""
    system = example.system or "You are a helpful assistant."
    return (
        f"{CHAT_START}system\n{system}{CHAT_END}\n{CHAT_START}user\n{example.prompt}{CHAT_END}\n{CHAT_START}assistant\n"
    )


class SupervisedDataset(Dataset):
    """Tokenizes one example per ``__getitem__``: prompt tokens are masked from the loss.

    ``tokenizer_cost_ms`` makes tokenizing a sample cost that much more CPU time, spent inside the
    tokenizer calls (half in each of the two): a stand-in for a slow tokenizer (a Python one, heavy
    normalisation, long documents), the regime where tokenizing in the loader dominates.
    """

    #: Tokenizer calls per sample (the prompt, then the response): each pays its share of the cost.
    TOKENIZER_CALLS = 2

    def __init__(self, examples: list[Example], tokenizer: Any, max_length: int, tokenizer_cost_ms: float = 0.0):
        if tokenizer_cost_ms < 0:
            raise ValueError(f"tokenizer_cost_ms {tokenizer_cost_ms}: must be >= 0")
        self.examples = examples
        self.max_length = max_length
        self.tokenizer_cost_ms = tokenizer_cost_ms
        # Without a private encode method to hook (not a transformers tokenizer), the cost is paid
        # in __getitem__ itself: still the dataset's work, just not inside the tokenizer call.
        self._cost_outside_ms = 0.0
        if tokenizer_cost_ms > 0 and callable(getattr(type(tokenizer), "_encode_plus", None)):
            tokenizer = copy.copy(tokenizer)
            tokenizer._encode_plus = _CostlyEncode(tokenizer, tokenizer_cost_ms / self.TOKENIZER_CALLS)
        elif tokenizer_cost_ms > 0:
            self._cost_outside_ms = tokenizer_cost_ms
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        example = self.examples[index]
        if self._cost_outside_ms:
            burn_cpu(self._cost_outside_ms)
        prompt_ids = self.tokenizer(chat_prompt(example), add_special_tokens=False)["input_ids"]
        response_ids = self.tokenizer(example.response + CHAT_END + "\n", add_special_tokens=False)["input_ids"]
        input_ids = (prompt_ids + response_ids)[: self.max_length]
        labels = ([IGNORE_INDEX] * len(prompt_ids) + response_ids)[: self.max_length]
        return {"input_ids": input_ids, "labels": labels}


class PadCollator:
    """Pads a batch to its longest example (dynamic padding), or to ``width`` positions (``padding="max_length"``), and
    builds the attention mask."""

    def __init__(self, pad_token_id: int, width: int | None = None):
        self.pad_token_id, self.width = pad_token_id, width

    def __call__(self, features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        longest = max(self.width or 0, max(len(f["input_ids"]) for f in features))
        input_ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(features), longest), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(features), longest), dtype=torch.long)
        for row, feature in enumerate(features):
            length = len(feature["input_ids"])
            input_ids[row, :length] = torch.tensor(feature["input_ids"], dtype=torch.long)
            labels[row, :length] = torch.tensor(feature["labels"], dtype=torch.long)
            attention_mask[row, :length] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}
