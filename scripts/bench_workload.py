"""A user-style training script with known costs, for scripts/bench_advice.py (and as a demo of a data-bound loop).

Per sample the Dataset burns ``--cpu-ms`` of CPU time and blocks ``--io-ms`` (a sleep standing in
for disk or network); ``collate_fn`` burns ``--collate-ms``; per step the main process burns
``--host-ms`` (Python-side work) and sleeps ``--gpu-ms`` (an accelerator it waits for), then takes an
optimizer step. CPU costs are CPU time, not wall time: under contention they take longer, as real
work does.

    python scripts/bench_workload.py --num-workers 2 --steps 60 --report out.json

It times itself as dlprof's step clock does: a step runs from the end of the previous one to the end of its
optimizer step, its wait for the batch included. ``--pause-every K --pause-ms P`` stands the main process still
for P ms after every K steps (as the profiler's export does; the pause is no step's time): the workers go on
filling the prefetch queue meanwhile. The measured rate is the steps after ``--warmup-steps`` over their time
(``--min-seconds T`` trains on past ``--steps`` until those steps have taken T seconds);
``--report`` also writes every step's wall time and wait (ms), and the steps after which it paused.
"""

from __future__ import annotations

import argparse
import json
import math
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--prefetch-factor", type=int, default=None)
    parser.add_argument("--cpu-ms", type=float, default=1.0)
    parser.add_argument("--io-ms", type=float, default=0.0)
    parser.add_argument("--collate-ms", type=float, default=0.0)
    parser.add_argument("--host-ms", type=float, default=1.0)
    parser.add_argument("--gpu-ms", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup-steps", type=int, default=10, help="steps excluded from the measured rate")
    parser.add_argument("--pause-every", type=int, default=0, help="pause the main process after every K steps")
    parser.add_argument("--pause-ms", type=float, default=1000.0, help="how long each pause lasts")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long (steps still bound it)")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=0.0,
        help="train past --steps until the steps after --warmup-steps have taken at least this long",
    )
    parser.add_argument("--report", help="write the measured steps/s (and every step's time) here (JSON)")
    return parser.parse_args()


def most_steps(args: argparse.Namespace) -> int:
    """An upper bound on the steps a run takes: ``--min-seconds`` of steps that last at least the host and GPU time.
    The dataset holds twice that many batches, so that no run reaches the end of its epoch."""
    shortest_step_ms = max(args.host_ms + args.gpu_ms, 1.0)
    return args.steps + math.ceil(1000 * args.min_seconds / shortest_step_ms)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # the "model" is tiny; keep torch's thread pool out of the measurement
    extra = {"prefetch_factor": args.prefetch_factor} if args.num_workers and args.prefetch_factor else {}
    loader = DataLoader(
        KnownCostDataset(2 * args.batch_size * most_steps(args), args.cpu_ms, args.io_ms),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        collate_fn=KnownCostCollate(args.collate_ms),
        **extra,
    )
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    wall_ms: list[float] = []
    wait_ms: list[float] = []
    paused_after: list[int] = []
    last = began = time.perf_counter()
    for step, batch in enumerate(loader):
        ready = time.perf_counter()
        burn_cpu(args.host_ms)
        time.sleep(args.gpu_ms / 1000)
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        now = time.perf_counter()
        wall_ms.append(1000 * (now - last))
        wait_ms.append(1000 * (ready - last))
        if args.max_seconds is not None and now - began >= args.max_seconds:
            break
        if step + 1 >= args.steps and sum(wall_ms[args.warmup_steps :]) >= 1000 * args.min_seconds:
            break
        if args.pause_every and (step + 1) % args.pause_every == 0:
            time.sleep(args.pause_ms / 1000)
            paused_after.append(step)
        last = time.perf_counter()
    timed = wall_ms[args.warmup_steps :]
    measured = 1000 * len(timed) / sum(timed)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(
                {
                    "steps_per_s": measured,
                    "num_workers": args.num_workers,
                    "step_ms": [round(ms, 4) for ms in wall_ms],
                    "wait_ms": [round(ms, 4) for ms in wait_ms],
                    "paused_after": paused_after,
                },
                f,
            )
    print(f"{measured:.2f} steps/s with num_workers={args.num_workers}")


if __name__ == "__main__":
    main()
