"""Big batches through shared memory: each sample is a ``--sample-mib`` float tensor, so each batch a worker hands
over takes ``--batch-size`` x that in ``/dev/shm``, and ``num_workers`` x ``prefetch_factor`` batches are in flight.
The fault is the machine's, not the script's: run it with a ``/dev/shm`` smaller than the batches in flight
(``docker run --shm-size``) to trigger it, with a big enough one for the control.

Options: --num-workers N, --steps N, --batch-size N, --sample-mib X, --sleep-ms X (per sample, in the worker: slower
workers than training, so that the prefetch queue fills only while training pauses).
"""

import argparse
import time

import torch
from _common import train
from torch.utils.data import DataLoader, Dataset


class BigSamples(Dataset):
    def __init__(self, length: int, sample_mib: float, sleep_s: float):
        self.length, self.numel, self.sleep_s = length, int(sample_mib * 2**20 / 4), sleep_s

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        time.sleep(self.sleep_s)
        return torch.full((self.numel,), float(index))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sample-mib", type=float, default=2.0)
    parser.add_argument("--sleep-ms", type=float, default=60.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(
        BigSamples(500 * args.batch_size, args.sample_mib, args.sleep_ms / 1000),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    model = torch.nn.Linear(1, 1)
    train(loader, model, args.steps, loss_of=lambda m, batch: m(batch.mean(dim=1, keepdim=True)).pow(2).mean())


if __name__ == "__main__":
    main()
