"""A user-style training script for the tests: each sample costs a known sleep and some CPU work.

Options: --num-workers N, --steps N, --sleep-ms X (per sample), --batch-size N,
--fail-at-step N (raise in the training loop), --fail-in-worker-at N (the dataset raises on sample N),
--persistent-workers, --epochs-of N (dataset length = N batches, so several epochs run).
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, length, sleep_s, fail_at):
        self.length, self.sleep_s, self.fail_at = length, sleep_s, fail_at

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if index == self.fail_at:
            raise ValueError(f"sample {index} is corrupt")
        time.sleep(self.sleep_s)
        return torch.full((16,), float(index))


def collate(samples):
    return torch.stack(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--sleep-ms", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--fail-at-step", type=int, default=-1)
    parser.add_argument("--fail-in-worker-at", type=int, default=-1)
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--epoch-batches", type=int, default=1000)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    dataset = SlowDataset(args.epoch_batches * args.batch_size, args.sleep_ms / 1000, args.fail_in_worker_at)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        collate_fn=collate,
        persistent_workers=args.persistent_workers and args.num_workers > 0,
    )
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while step < args.steps:
        for batch in loader:
            if step == args.fail_at_step:
                raise RuntimeError(f"training diverged at step {step}")
            model(batch).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step >= args.steps:
                break
    print(f"trained {step} steps")
    raise SystemExit(args.exit_code)


if __name__ == "__main__":
    main()
