"""A training script over a map-style Dataset that trains ``--steps`` optimizer steps, epoch after epoch, and checks
that every epoch gave each sample exactly once (one line per whole epoch appended to ``--log``: "ok", else what went
wrong). For ``dlprof record --try-workers ... --then``: the DataLoader switches under it during the trials and after.

Options: --num-workers N, --samples N (per epoch), --batch-size N, --steps N (0: until stopped), --log PATH.
"""

import argparse
import itertools
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self, samples: int):
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.001)
        return torch.tensor([float(index)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(Samples(args.samples), batch_size=args.batch_size, num_workers=args.num_workers)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    with open(args.log, "a") as log:
        for epoch in itertools.count():
            seen = []
            for batch in loader:
                seen += [int(x) for x in batch.flatten().tolist()]
                model(batch).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
                time.sleep(0.002)
                steps += 1
                if steps == args.steps:
                    return
            ok = sorted(seen) == list(range(args.samples))
            log.write(f"epoch {epoch}: {'ok' if ok else f'{len(seen)} samples, {len(set(seen))} distinct'}\n")
            log.flush()


if __name__ == "__main__":
    main()
