"""Threads oversubscribed: each DataLoader worker encodes its batch with a fast tokenizer's ``encode_batch`` (the
``tokenizers`` library, whose Rust thread pool runs when ``TOKENIZERS_PARALLELISM=true``), while training runs
torch's intra-op threads on every core. Run it with ``TOKENIZERS_PARALLELISM=true`` to trigger the fault, with
``false`` for the control (the fix); the script leaves the variable as its environment sets it.

Each document is tokenized whole and then cut to ``--max-length`` tokens: the workers' work is the tokenizer's, the
training's is small. On two cores, one worker can show its pool's CPU beyond one core (two workers share them).

Options: --num-workers N, --steps N, --seconds X (train at most this long), --batch-size N, --max-length N,
--repeat N (the documents, N times over).
"""

import argparse
import os

import torch
from _common import IGNORE_INDEX, TOKENIZER_FILE, TinyLM, texts, train
from tokenizers import Tokenizer
from torch.utils.data import DataLoader


class EncodeBatch:
    """collate_fn: encodes the batch's texts at once (in parallel where the tokenizer may) and pads them."""

    def __init__(self, max_length: int):
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_FILE))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id("<|endoftext|>"))

    def __call__(self, samples):
        encodings = self.tokenizer.encode_batch(samples)
        input_ids = torch.tensor([e.ids for e in encodings])
        attention_mask = torch.tensor([e.attention_mask for e in encodings])
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # training's intra-op threads on every usable core
    # Long documents: every example with the next ones, so that a batch's encoding is worth parallelising and the
    # workers, not the training, are the bottleneck.
    base = texts()
    documents = ["\n".join(base[i : i + 8]) for i in range(len(base))] * args.repeat
    collate = EncodeBatch(args.max_length)
    loader = DataLoader(
        documents, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers, collate_fn=collate
    )
    train(loader, TinyLM(collate.tokenizer.get_vocab_size()), args.steps, seconds=args.seconds)


if __name__ == "__main__":
    main()
