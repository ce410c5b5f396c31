"""Tokenizing in the loop: the dataset tokenizes each sample in ``__getitem__`` with a slow tokenizer (``--cost-ms`` of
CPU burnt inside each tokenizer call, a stand-in for heavy normalisation or a Python tokenizer); ``--fixed``
tokenizes the whole dataset once before training, the fix, and the workers only index it.

Options: --num-workers N, --steps N, --batch-size N, --max-length N, --cost-ms X, --repeat N (the examples, N times
over), --fixed.
"""

import argparse
import time

import torch
from _common import Pad, TinyLM, Tokenized, load_tokenizer, texts, train
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerFast


class SlowTokenizer(PreTrainedTokenizerFast):
    """A fast tokenizer made slow: each encode spins ``cost_ms`` of this thread's CPU time first (CPU time, so that
    under contention it takes longer, as real work does)."""

    cost_ms = 0.0

    def _encode_plus(self, *args, **kwargs):
        end = time.thread_time_ns() + int(self.cost_ms * 1e6)
        while time.thread_time_ns() < end:
            pass
        return super()._encode_plus(*args, **kwargs)


class TokenizeOnRead(Dataset):
    """Raw texts, tokenized in ``__getitem__``: in the DataLoader's workers, every epoch again."""

    def __init__(self, tokenizer, max_length: int, repeat: int):
        self.texts, self.tokenizer, self.max_length = texts(repeat), tokenizer, max_length

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, index):
        return self.tokenizer(self.texts[index])["input_ids"][: self.max_length]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--cost-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--fixed", action="store_true", help="tokenize the dataset once, before training")
    args = parser.parse_args()
    torch.manual_seed(0)
    plain = load_tokenizer()
    tokenizer = SlowTokenizer(tokenizer_object=plain.backend_tokenizer, pad_token=plain.pad_token)
    tokenizer.cost_ms = args.cost_ms
    if args.fixed:  # each distinct example once: what a cached, pre-tokenized dataset costs
        dataset = Tokenized(tokenizer, args.max_length, args.repeat)
    else:
        dataset = TokenizeOnRead(tokenizer, args.max_length, args.repeat)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        collate_fn=Pad(tokenizer.pad_token_id, None),
    )
    train(loader, TinyLM(len(tokenizer)), args.steps)


if __name__ == "__main__":
    main()
