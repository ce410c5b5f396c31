"""DDP on CPU (gloo) for the launcher tests: ``torchrun --nproc-per-node 2 train_ddp.py --steps N``.

Rank 1's Dataset is slower (``--slow-rank-ms`` of CPU per sample on rank 1 only): rank 1 waits for
data, and rank 0 then waits for rank 1 in DDP's all-reduce.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from dlprof.workloads.sft import burn_cpu  # CPU time, as real loading work takes


class Samples(Dataset):
    def __init__(self, size: int, cost_ms: float):
        self.size, self.cost_ms = size, cost_ms

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        burn_cpu(self.cost_ms)
        g = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=g), torch.randn(1, generator=g)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--sample-ms", type=float, default=0.2)
    parser.add_argument("--slow-rank-ms", type=float, default=4.0)
    parser.add_argument("--host-ms", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cost = args.sample_ms + (args.slow_rank_ms if rank == 1 else 0.0)
    dataset = Samples(4096, cost)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=DistributedSampler(dataset, seed=0), num_workers=args.num_workers)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            burn_cpu(args.host_ms)  # the rest of a step's host work (logging, a scheduler)
            step += 1
            if step >= args.steps:
                break
    dist.destroy_process_group()
    print(f"rank {rank}: {step} steps, pid {os.getpid()}")


if __name__ == "__main__":
    main()
