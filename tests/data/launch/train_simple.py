"""A small single-process training for the launcher tests (run by python, by wrappers, by accelerate).

``--helper`` first runs a helper subprocess that iterates a DataLoader without training (data
preparation, as users do): dlprof must record the training, not the helper.
"""
import argparse
import os
import subprocess
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

HELPER = """
import torch
from torch.utils.data import DataLoader, TensorDataset
total = sum(float(x.sum()) for (x,) in DataLoader(TensorDataset(torch.ones(200, 4)), batch_size=2))
print(f"helper: {total:.0f}")
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--helper", action="store_true")
    args = parser.parse_args(argv)
    if args.helper:
        subprocess.run([sys.executable, "-c", HELPER], check=True)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=args.num_workers)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while step < args.steps:
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step >= args.steps:
                break
    print(f"trained {step} steps in pid {os.getpid()}")


if __name__ == "__main__":
    main()
