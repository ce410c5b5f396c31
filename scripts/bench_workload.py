"""A user-style training script with known costs, for scripts/bench_advice.py (and as a demo of a data-bound loop).

Per sample the Dataset burns ``--cpu-ms`` of CPU time and blocks ``--io-ms`` (a sleep standing in
for disk or network); ``collate_fn`` burns ``--collate-ms``; per step the main process burns
``--host-ms`` (Python-side work) and sleeps ``--gpu-ms`` (an accelerator it waits for), then takes an
optimizer step. CPU costs are CPU time, not wall time: under contention they take longer, as real
work does.

    python scripts/bench_workload.py --num-workers 2 --steps 60 --report out.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Dataset

from dlprof.workloads.sft import burn_cpu


class KnownCostDataset(Dataset):
    def __init__(self, length: int, cpu_ms: float, io_ms: float):
        self.length, self.cpu_ms, self.io_s = length, cpu_ms, io_ms / 1000

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        burn_cpu(self.cpu_ms)
        if self.io_s:
            time.sleep(self.io_s)
        return torch.full((16,), float(index % 7))


class KnownCostCollate:
    def __init__(self, cpu_ms: float):
        self.cpu_ms = cpu_ms

    def __call__(self, samples: list[torch.Tensor]) -> torch.Tensor:
        burn_cpu(self.cpu_ms)
        return torch.stack(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--cpu-ms", type=float, default=1.0)
    parser.add_argument("--io-ms", type=float, default=0.0)
    parser.add_argument("--collate-ms", type=float, default=0.0)
    parser.add_argument("--host-ms", type=float, default=1.0)
    parser.add_argument("--gpu-ms", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup-steps", type=int, default=10, help="steps excluded from the measured rate")
    parser.add_argument("--report", help="write the measured steps/s here (JSON)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the "model" is tiny; keep torch's thread pool out of the measurement
    loader = DataLoader(
        KnownCostDataset(args.steps * args.batch_size * 2, args.cpu_ms, args.io_ms),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        collate_fn=KnownCostCollate(args.collate_ms),
    )
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    started = None
    for step, batch in enumerate(loader):
        if step == args.warmup_steps:
            started = time.perf_counter()
        burn_cpu(args.host_ms)
        time.sleep(args.gpu_ms / 1000)
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step + 1 >= args.steps:
            break
    measured = (args.steps - args.warmup_steps) / (time.perf_counter() - started)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"steps_per_s": measured, "num_workers": args.num_workers}, f)
    print(f"{measured:.2f} steps/s with num_workers={args.num_workers}")


if __name__ == "__main__":
    main()
