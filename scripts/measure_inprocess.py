"""Truth measured without dlprof, in one process: candidate num_workers trained in turn, in alternating rounds.

Launches of the same training differ in speed from one to the next (on this machine by more than the targets),
while the ratio between two settings inside one process holds. This script measures that truth for
scripts/bench_advice.py, with no dlprof in the process: one model, one dataset, and for every segment a fresh
DataLoader with the segment's num_workers, in rounds whose order alternates (0 1 2 4, 4 2 1 0, ...) so that
drift cancels.

    python scripts/measure_inprocess.py synthetic --counts 0,1,2,4 --io-ms 15 --gpu-ms 20 --report out.json
    python scripts/measure_inprocess.py lora --counts 0,1,2,4 --report out.json
    python scripts/measure_inprocess.py trainer --counts 0,1,2,4 --report out.json

* ``synthetic`` (scripts/bench_workload.py's known costs): each segment runs inside one epoch of a fresh DataLoader;
  its first steps (the new workers' start and their first batches: twice the prefetch queue, ``2 x num_workers x
  2`` batches, and 10 more; ``--skip-steps`` sets a fixed number) are left out, and the rate is the rest's steps
  over their time, timed from the end of the last step left out, at least ``--timed-steps`` steps and
  ``--min-seconds`` seconds, ending on a whole round of the workers' delivery (a multiple of ``num_workers``
  steps: with a few workers steps alternate, and a stretch ending mid-round counts one kind once too often).
* ``lora`` (the built-in workload) and ``trainer`` (scripts/bench_trainer.py's Hugging Face Trainer): each segment
  runs ``--epochs`` whole epochs, their worker restarts included, and the rate is their steps over their time. A
  first epoch at the first count warms the process up and is not counted.

The report (``--report``) holds, per count, the rate of every segment (``segments``, with their steps and seconds) and
their median, ``steps_per_s``, and their range, ``spread_pct`` (% of the median).
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
#: Synthetic: samples in the dataset, more than any segment takes (each segment starts a fresh DataLoader on it).
SYNTHETIC_SAMPLES = 1_000_000
#: Synthetic: PyTorch's default prefetch_factor (bench_workload.py sets none), and the steps left out beyond two
#: queues' worth (the workers' start slows the first steps: dlprof leaves out 5, the truth twice that).
PREFETCH_FACTOR = 2
SETTLE_STEPS = 10


def round_orders(counts: list[int], rounds: int) -> list[list[int]]:
    """The counts of every round: as given, then reversed, and so on."""
    return [counts if r % 2 == 0 else counts[::-1] for r in range(rounds)]


def run_rounds(segment: Segment, counts: list[int], rounds: int) -> dict[int, list[tuple[int, float]]]:
    """Every segment's (steps, seconds), per count, the counts in alternating order round by round."""
    timed: dict[int, list[tuple[int, float]]] = {n: [] for n in counts}
    for r, order in enumerate(round_orders(counts, rounds)):
        for n in order:
            steps, seconds = segment(n)
            timed[n].append((steps, seconds))
            print(f"round {r}: num_workers={n}: {steps / seconds:.2f} steps/s ({steps} steps)", file=sys.stderr)
    return timed


def synthetic(args: argparse.Namespace) -> Segment:
    from bench_workload import KnownCostCollate, KnownCostDataset

    from dlprof.workloads.sft import burn_cpu

    torch.set_num_threads(1)
    dataset = KnownCostDataset(SYNTHETIC_SAMPLES, args.cpu_ms, args.io_ms)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def segment(num_workers: int) -> tuple[int, float]:
        skip = args.skip_steps if args.skip_steps is not None else 2 * num_workers * PREFETCH_FACTOR + SETTLE_STEPS
        period = max(1, num_workers)
        loader = DataLoader(
            dataset, batch_size=args.batch_size, num_workers=num_workers, collate_fn=KnownCostCollate(args.collate_ms)
        )
        started = time.perf_counter() if skip == 0 else None
        for step, batch in enumerate(loader):
            burn_cpu(args.host_ms)
            time.sleep(args.gpu_ms / 1000)
            model(batch).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            now, timed = time.perf_counter(), step + 1 - skip
            if timed == 0:
                started = now  # the end of the last step left out: the next step's wait for its batch is timed
            elif timed >= args.timed_steps and now - started >= args.min_seconds and timed % period == 0:
                return timed, now - started
        raise SystemExit(f"synthetic: the dataset ({SYNTHETIC_SAMPLES} samples) ran out before a segment was timed")

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
    parser.add_argument("--timed-steps", type=int, default=60, help="synthetic: fewest steps timed per segment")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="synthetic: shortest time timed per segment")
    parser.add_argument(
        "--skip-steps",
        type=int,
        default=None,
        help="synthetic: steps left out at a segment's start [default: 2 x num_workers x 2 + 10]",
    )
    for name, default in (("cpu-ms", 1.0), ("io-ms", 0.0), ("collate-ms", 0.0), ("host-ms", 1.0), ("gpu-ms", 10.0)):
        parser.add_argument(f"--{name}", type=float, default=default, help="synthetic: as scripts/bench_workload.py")
    parser.add_argument("--report", type=Path, help="write the rates here (JSON)")
    args = parser.parse_args()
    counts = [int(word) for word in args.counts.split(",")]
    timed = run_rounds(WORKLOADS[args.workload](args), counts, args.rounds)
    rates = {n: [steps / seconds for steps, seconds in t] for n, t in timed.items()}
    summary = {
        "workload": args.workload,
        "rounds": args.rounds,
        "counts": {
            str(n): {
                "steps_per_s": statistics.median(r),
                "spread_pct": 100 * (max(r) - min(r)) / statistics.median(r),
                "segments": r,
                "segment_steps": [steps for steps, _ in timed[n]],
                "segment_seconds": [seconds for _, seconds in timed[n]],
            }
            for n, r in rates.items()
        },
    }
    if args.report:
        args.report.write_text(json.dumps(summary, indent=1) + "\n")
    for n, r in rates.items():
        spread = summary["counts"][str(n)]["spread_pct"]
        print(f"num_workers={n}: {statistics.median(r):.2f} steps/s (median of {len(r)}, spread {spread:.1f} %)")


if __name__ == "__main__":
    main()
