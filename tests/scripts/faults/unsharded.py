"""An IterableDataset that is not sharded: its ``__iter__`` ignores ``get_worker_info()``, so each of the
``--num-workers`` workers yields the whole stream and the training sees every sample once per worker; ``--fixed``
gives each worker every num_workers-th sample, the fix. ``--shards N`` makes it a dataset of N shards that says so
(``n_shards``, as Hugging Face ``datasets`` does), read shard by shard, a worker's shards being every
num_workers-th one: a worker without a shard yields nothing.

Options: --num-workers N, --steps N, --batch-size N, --fixed, --shards N.
"""

import argparse

import torch
from _common import Pad, TinyLM, Tokenized, load_tokenizer, train
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Stream(IterableDataset):
    """The tokenized examples as a stream, in a shuffled order fixed by its seed."""

    def __init__(self, samples: list, sharded: bool):
        self.samples, self.sharded = samples, sharded
        self.order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(0)).tolist()

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if self.sharded and info is not None else (0, 1)
        for index in self.order[start::step]:
            yield self.samples[index]


class ShardedStream(IterableDataset):
    """``shards`` shards of the examples; each worker reads the shards ``id, id + num_workers, ...``."""

    def __init__(self, samples: list, shards: int):
        self.shards = [samples[i::shards] for i in range(shards)]

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for shard in self.shards[start::step]:
            yield from shard


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--fixed", action="store_true", help="shard the stream by worker id")
    parser.add_argument("--shards", type=int, default=0, help="a dataset of this many shards that says so")
    args = parser.parse_args()
    torch.manual_seed(0)
    tokenizer = load_tokenizer()
    samples = Tokenized(tokenizer, args.max_length).ids
    dataset = ShardedStream(samples, args.shards) if args.shards else Stream(samples, args.fixed)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=Pad(tokenizer.pad_token_id, None)
    )
    train(loader, TinyLM(len(tokenizer)), args.steps)


if __name__ == "__main__":
    main()
