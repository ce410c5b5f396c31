"""Copy-on-read: a map-style Dataset holding a large Python list of strings, read in random order by the DataLoader's
workers. Reading a string touches its reference count, so each worker copies the pages of every string it reads and
its memory grows with the samples touched; ``--fixed`` keeps the same strings in one bytes buffer with a numpy
array of offsets (no Python object per sample), the fix.

Options: --num-workers N, --steps N, --seconds X (train at most this long), --batch-size N, --samples N (strings in the
dataset), --step-ms X (each training step sleeps this long: a model's compute, during which the workers read on),
--fixed.
"""

import argparse
import time

import numpy as np
import torch
from _common import train
from torch.utils.data import DataLoader, Dataset

WIDTH = 32  # bytes of each string a sample keeps


def strings(count: int) -> list[str]:
    """``count`` distinct strings of about a hundred characters, each its own Python object."""
    return [
        f"sample {i:07d}: the quick brown fox jumps over the lazy dog {i * 7919 % 100003:06d} " * 2
        for i in range(count)
    ]


def to_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data[:WIDTH].ljust(WIDTH)), dtype=torch.uint8).float()


class ListOfStrings(Dataset):
    def __init__(self, count: int):
        self.items = strings(count)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return to_tensor(self.items[index].encode())


class BufferAndOffsets(Dataset):
    """The same strings in one bytes buffer: reading a sample touches no per-sample Python object."""

    def __init__(self, count: int):
        encoded = [s.encode() for s in strings(count)]
        self.buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.offsets = np.cumsum([0] + [len(e) for e in encoded])

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, index):
        return to_tensor(self.buffer[self.offsets[index] : self.offsets[index + 1]].tobytes())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=300_000)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--fixed", action="store_true", help="keep the strings in a bytes buffer and offsets")
    args = parser.parse_args()
    torch.manual_seed(0)
    dataset = BufferAndOffsets(args.samples) if args.fixed else ListOfStrings(args.samples)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    model = torch.nn.Linear(WIDTH, 1)

    def loss_of(m, batch):
        time.sleep(args.step_ms / 1000)
        return m(batch / 255).pow(2).mean()

    train(loader, model, args.steps, loss_of=loss_of, seconds=args.seconds)


if __name__ == "__main__":
    main()
