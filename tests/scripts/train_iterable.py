"""A training script over an IterableDataset sharded with get_worker_info that keeps its own iterator
(``it = iter(loader)``, ``next(it)``), as some scripts do; each epoch's samples are checked, the outcome appended to
``--log``.

Options: --num-workers N, --samples N (per epoch), --batch-size N, --epochs N (then it ends by itself), --log PATH (one
line per epoch: "ok" when every sample came exactly once, else what went wrong).
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Shards(IterableDataset):
    def __init__(self, samples: int):
        self.samples = samples

    def __iter__(self):
        info = get_worker_info()
        count, index = (1, 0) if info is None else (info.num_workers, info.id)
        for i in range(index, self.samples, count):
            time.sleep(0.001)
            yield torch.tensor([float(i)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=100000)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(Shards(args.samples), batch_size=args.batch_size, num_workers=args.num_workers)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with open(args.log, "a") as log:
        for epoch in range(args.epochs):
            seen, it = [], iter(loader)
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                seen += [int(x) for x in batch.flatten().tolist()]
                model(batch).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
                time.sleep(0.002)
            ok = sorted(seen) == list(range(args.samples))
            log.write(f"epoch {epoch}: {'ok' if ok else f'{len(seen)} samples, {len(set(seen))} distinct'}\n")
            log.flush()


if __name__ == "__main__":
    main()
