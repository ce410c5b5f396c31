"""Padding: a tiny language-model fine-tune whose collate_fn pads every sample to ``--max-length`` (512) with an
attention mask, though the real samples are short; ``--fixed`` pads each batch to its longest sample instead
(dynamic padding), the fix.

Options: --num-workers N, --steps N, --batch-size N, --max-length N, --repeat N (the examples, N times over), --fixed.
"""

import argparse

import torch
from _common import Pad, TinyLM, Tokenized, load_tokenizer, train
from torch.utils.data import DataLoader


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--fixed", action="store_true", help="pad to the batch's longest sample")
    args = parser.parse_args()
    torch.manual_seed(0)
    tokenizer = load_tokenizer()
    loader = DataLoader(
        Tokenized(tokenizer, args.max_length, args.repeat),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        collate_fn=Pad(tokenizer.pad_token_id, None if args.fixed else args.max_length),
    )
    train(loader, TinyLM(len(tokenizer)), args.steps)


if __name__ == "__main__":
    main()
