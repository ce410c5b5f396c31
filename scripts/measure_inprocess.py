"""Truth measured without dlprof, in one process: candidate num_workers trained in turn, in alternating rounds.

Launches of the same training differ in speed from one to the next (on this machine by more than the targets),
while the ratio between two settings inside one process holds. This script measures that truth for
scripts/bench_advice.py, with no dlprof in the process: one model, one dataset, and for every segment a fresh
DataLoader with the segment's num_workers, in rounds whose order alternates (0 1 2 4, 4 2 1 0, ...) so that
drift cancels.

    python scripts/measure_inprocess.py synthetic --counts 0,1,2,4 --io-ms 15 --gpu-ms 20 --report out.json
    python scripts/measure_inprocess.py lora --counts 0,1,2,4 --report out.json
    python scripts/measure_inprocess.py trainer --counts 0,1,2,4 --report out.json

* ``synthetic`` (scripts/bench_workload.py's known costs): each segment runs ``--segment-steps`` steps inside one
  epoch; its first ``--skip-steps`` (the new workers' start and their first batches) are left out, and the rate is
  the rest's steps over their time.
* ``lora`` (the built-in workload) and ``trainer`` (scripts/bench_trainer.py's Hugging Face Trainer): each segment
  runs ``--epochs`` whole epochs, their worker restarts included, and the rate is their steps over their time. A
  first epoch at the first count warms the process up and is not counted.

The report (``--report``) holds, per count, the rate of every segment and their median: ``steps_per_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

#: A segment runs ``train(num_workers)`` and returns (steps, seconds) it measured.
Segment = Callable[[int], tuple[int, float]]


def round_orders(counts: list[int], rounds: int) -> list[list[int]]:
    """The counts of every round: as given, then reversed, and so on."""
    return [counts if r % 2 == 0 else counts[::-1] for r in range(rounds)]


def run_rounds(segment: Segment, counts: list[int], rounds: int) -> dict[int, list[float]]:
    rates: dict[int, list[float]] = {n: [] for n in counts}
    for r, order in enumerate(round_orders(counts, rounds)):
        for n in order:
            steps, seconds = segment(n)
            rates[n].append(steps / seconds)
            print(f"round {r}: num_workers={n}: {steps / seconds:.2f} steps/s ({steps} steps)", file=sys.stderr)
    return rates


def synthetic(args: argparse.Namespace) -> Segment:
    from bench_workload import KnownCostCollate, KnownCostDataset

    from dlprof.workloads.sft import burn_cpu

    torch.set_num_threads(1)
    dataset = KnownCostDataset(args.segment_steps * args.batch_size * 2, args.cpu_ms, args.io_ms)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def segment(num_workers: int) -> tuple[int, float]:
        loader = DataLoader(
            dataset, batch_size=args.batch_size, num_workers=num_workers, collate_fn=KnownCostCollate(args.collate_ms)
        )
        started = None
        for step, batch in enumerate(loader):
            if step == args.skip_steps:
                started = time.perf_counter()
            burn_cpu(args.host_ms)
            time.sleep(args.gpu_ms / 1000)
            model(batch).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            if step + 1 >= args.segment_steps:
                break
        return args.segment_steps - args.skip_steps, time.perf_counter() - started

    return segment


def lora(args: argparse.Namespace) -> Segment:
    from dlprof.workloads.lora import DEFAULT_DATASET, LEARNING_RATE, WorkloadOptions, build_model, load_tokenizer
    from dlprof.workloads.records import load_examples
    from dlprof.workloads.sft import PadCollator, SupervisedDataset

    options = WorkloadOptions(batch_size=args.batch_size, device="cpu", seed=0)
    torch.manual_seed(0)
    tokenizer = load_tokenizer(options)
    model = build_model(options, tokenizer, "cpu")
    dataset = SupervisedDataset(load_examples(DEFAULT_DATASET), tokenizer, options.max_length, 0.0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    model.train()
    generator = torch.Generator().manual_seed(0)

    def epochs(num_workers: int, count: int) -> tuple[int, float]:
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=True,
            generator=generator,
            num_workers=num_workers,
            collate_fn=PadCollator(tokenizer.pad_token_id),
        )
        steps, started = 0, time.perf_counter()
        for _ in range(count):
            for batch in loader:  # a new iterator each epoch: the workers restart, as by default
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
        return steps, time.perf_counter() - started

    epochs(args.warmup_workers, 1)  # warm-up: allocator, caches, lazy imports
    return lambda num_workers: epochs(num_workers, args.epochs)


def trainer(args: argparse.Namespace) -> Segment:
    from bench_trainer import DATA, MAX_LENGTH, InstructionDataset, SpeedCallback
    from transformers import (
        DataCollatorForLanguageModeling,
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
        Trainer,
        TrainingArguments,
    )

    from dlprof.workloads.records import load_examples

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(DATA / "tokenizer.json"), eos_token="<|endoftext|>")
    tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=MAX_LENGTH,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    speed = SpeedCallback()
    output_dir = tempfile.mkdtemp(prefix="measure-inprocess-")
    training_args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=args.batch_size,
        dataloader_num_workers=args.warmup_workers,
        num_train_epochs=1,
        learning_rate=5e-4,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
    )
    hf_trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=training_args,
        train_dataset=InstructionDataset(load_examples(DATA / "self_cognition.json"), tokenizer, MAX_LENGTH),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=[speed],
    )
    hf_trainer.train()  # warm-up

    def segment(num_workers: int) -> tuple[int, float]:
        hf_trainer.args.dataloader_num_workers = num_workers
        hf_trainer.args.num_train_epochs = args.epochs
        before = len(speed.epochs)
        hf_trainer.train()  # the Trainer builds its DataLoader again, with this count
        timed = speed.epochs[before:]
        return sum(steps for steps, _ in timed), sum(seconds for _, seconds in timed)

    return segment


WORKLOADS = {"synthetic": synthetic, "lora": lora, "trainer": trainer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--counts", default="0,1,2,4", help="num_workers to measure, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2, help="lora, trainer: whole epochs per segment")
    parser.add_argument("--warmup-workers", type=int, default=0, help="lora, trainer: num_workers of the warm-up")
    parser.add_argument("--segment-steps", type=int, default=200, help="synthetic: steps per segment")
    parser.add_argument("--skip-steps", type=int, default=30, help="synthetic: steps left out at a segment's start")
    for name, default in (("cpu-ms", 1.0), ("io-ms", 0.0), ("collate-ms", 0.0), ("host-ms", 1.0), ("gpu-ms", 10.0)):
        parser.add_argument(f"--{name}", type=float, default=default, help="synthetic: as scripts/bench_workload.py")
    parser.add_argument("--report", type=Path, help="write the rates here (JSON)")
    args = parser.parse_args()
    counts = [int(word) for word in args.counts.split(",")]
    rates = run_rounds(WORKLOADS[args.workload](args), counts, args.rounds)
    summary = {
        "workload": args.workload,
        "rounds": args.rounds,
        "counts": {str(n): {"steps_per_s": statistics.median(r), "segments": r} for n, r in rates.items()},
    }
    if args.report:
        args.report.write_text(json.dumps(summary, indent=1) + "\n")
    for n, r in rates.items():
        spread = 100 * (max(r) - min(r)) / statistics.median(r)
        print(f"num_workers={n}: {statistics.median(r):.2f} steps/s (median of {len(r)}, spread {spread:.1f} %)")


if __name__ == "__main__":
    main()
