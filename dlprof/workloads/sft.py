"""Supervised fine-tuning data as the reference scenario has it: tokenize in ``__getitem__``, pad in ``collate_fn``.

Module-level classes, so that DataLoader workers started with ``spawn`` can unpickle them.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from dlprof.workloads.records import Example

#: Label of tokens the loss ignores (prompt and padding), as transformers' causal LM loss expects.
IGNORE_INDEX = -100
CHAT_START, CHAT_END = "<|im_start|>", "<|im_end|>"


def chat_prompt(example: Example) -> str:
    """The prompt in ChatML, the format of Qwen models: system and user turns, then the assistant's header."""
    system = example.system or "You are a helpful assistant."
    return f"{CHAT_START}system\n{system}{CHAT_END}\n{CHAT_START}user\n{example.prompt}{CHAT_END}\n{CHAT_START}assistant\n"


class SupervisedDataset(Dataset):
    """Tokenizes one example per ``__getitem__``: prompt tokens are masked from the loss."""

    def __init__(self, examples: list[Example], tokenizer: Any, max_length: int):
        self.examples = examples
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        example = self.examples[index]
        prompt_ids = self.tokenizer(chat_prompt(example), add_special_tokens=False)["input_ids"]
        response_ids = self.tokenizer(example.response + CHAT_END + "\n", add_special_tokens=False)["input_ids"]
        input_ids = (prompt_ids + response_ids)[: self.max_length]
        labels = ([IGNORE_INDEX] * len(prompt_ids) + response_ids)[: self.max_length]
        return {"input_ids": input_ids, "labels": labels}


class PadCollator:
    """Pads a batch to its longest example (dynamic padding) and builds the attention mask."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        input_ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(features), longest), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(features), longest), dtype=torch.long)
        for row, feature in enumerate(features):
            length = len(feature["input_ids"])
            input_ids[row, :length] = torch.tensor(feature["input_ids"], dtype=torch.long)
            labels[row, :length] = torch.tensor(feature["labels"], dtype=torch.long)
            attention_mask[row, :length] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}
