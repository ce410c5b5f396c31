"""A plain Hugging Face ``Trainer`` fine-tune, as a user writes one: the real-model case of scripts/bench_advice.py.

A tiny GPT-2-architecture model (random weights, built from a config), the shipped tokenizer and the
bundled self-cognition data, tokenized in the Dataset's ``__getitem__`` and padded by a collator.
Fully offline. It times itself with a ``TrainerCallback`` (every optimizer step, every epoch) and,
with ``--report``, writes what it measured:

    python scripts/bench_trainer.py --num-workers 2 --epochs 3 --report out.json
    dlprof record -- python scripts/bench_trainer.py --num-workers 2 --epochs 3

``steps_per_s_epochs`` is steps/s over whole epochs after the first (warm-up), worker restarts at
epoch boundaries included; ``steps_per_s_steady`` is steps over time inside the epochs after the first,
each epoch's start-up left out (its settling steps and twice the prefetch queue, as the built-in
workload's ``--report`` does). ``step_ms`` and ``step_epoch`` are every step's time and epoch index.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from dlprof.core.manifest import EPOCH_SETTLE_STEPS  # noqa: E402
from dlprof.workloads.records import load_examples  # noqa: E402

DATA = REPO / "dlprof" / "workloads" / "data"
MAX_LENGTH = 512


class InstructionDataset(Dataset):
    """Prompt and response as one text, tokenized per sample in ``__getitem__`` (the loss covers every token)."""

    def __init__(self, examples, tokenizer, max_length: int):
        self.examples, self.tokenizer, self.max_length = examples, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict:
        example = self.examples[index]
        text = f"### Instruction:\n{example.prompt}\n### Response:\n{example.response}{self.tokenizer.eos_token}"
        return self.tokenizer(text, truncation=True, max_length=self.max_length)


class SpeedCallback(TrainerCallback):
    """Times every optimizer step (from the previous step's end or the epoch's start) and every epoch."""

    def __init__(self):
        self.epochs: list[tuple[int, float]] = []  # (steps, seconds)
        self.step_ms: list[tuple[int, float]] = []  # (epoch index, ms)
        self._epoch_start = self._last = 0.0
        self._epoch_steps = 0

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._epoch_start = self._last = time.perf_counter()  # before the DataLoader's iterator starts its workers
        self._epoch_steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.step_ms.append((len(self.epochs), 1000 * (now - self._last)))
        self._last = now
        self._epoch_steps += 1

    def on_epoch_end(self, args, state, control, **kwargs):
        self.epochs.append((self._epoch_steps, time.perf_counter() - self._epoch_start))

    def summary(self, steps_per_epoch: int, queue_steps: int) -> dict:
        whole = [(steps, seconds) for steps, seconds in self.epochs[1:] if steps == steps_per_epoch]
        skip = EPOCH_SETTLE_STEPS + 2 * queue_steps  # each epoch's start-up: workers start, the queue fills
        by_epoch: dict[int, list[float]] = {}
        for epoch, ms in self.step_ms:
            by_epoch.setdefault(epoch, []).append(ms)
        steady = [ms for epoch, steps in by_epoch.items() if epoch >= 1 for ms in steps[skip:]]
        return {
            "steps_per_s_epochs": sum(s for s, _ in whole) / sum(t for _, t in whole) if whole else None,
            "steps_per_s_steady": 1000 * len(steady) / sum(steady) if steady else None,
            "epochs": sum(1 for steps, _ in self.epochs if steps == steps_per_epoch),
            "epochs_measured": len(whole),
            "steps_per_epoch": steps_per_epoch,
            "epoch_s": [round(seconds, 4) for _, seconds in self.epochs],
            "step_epoch": [epoch for epoch, _ in self.step_ms],
            "step_ms": [round(ms, 4) for _, ms in self.step_ms],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (overrides --epochs)")
    parser.add_argument("--persistent-workers", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path, help="write the measured speed here (JSON)")
    parser.add_argument(
        "--dlprof-try-workers",
        metavar="COUNTS",
        help="record with DlprofCallback(try_workers=COUNTS, then='best') into --dlprof-out/then (in-process trials)",
    )
    parser.add_argument("--dlprof-out", type=Path, default=Path("traces"))
    parser.add_argument(
        "--dlprof-trial-steps", type=int, help="steps per trial segment (default: dlprof's, from the step time)"
    )
    args = parser.parse_args()
    callbacks: list = []
    if args.dlprof_try_workers:  # created right before the Trainer: it instruments the DataLoaders made from then on
        from dlprof.hf import DlprofCallback

        callbacks.append(
            DlprofCallback(
                out_dir=args.dlprof_out,
                name="then",
                try_workers=args.dlprof_try_workers,
                trial_steps=args.dlprof_trial_steps,
                then="best",
            )
        )

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(DATA / "tokenizer.json"), eos_token="<|endoftext|>")
    tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(args.seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=MAX_LENGTH,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    dataset = InstructionDataset(load_examples(DATA / "self_cognition.json"), tokenizer, MAX_LENGTH)
    speed = SpeedCallback()
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=args.batch_size,
            dataloader_num_workers=args.num_workers,
            dataloader_persistent_workers=args.persistent_workers and args.num_workers > 0,
            num_train_epochs=args.epochs,
            max_steps=args.max_steps,
            learning_rate=5e-4,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            seed=args.seed,
        )
        trainer = Trainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
            callbacks=[speed, *callbacks],
        )
        trainer.train()
    steps_per_epoch = math.ceil(len(dataset) / args.batch_size)  # one process, no gradient accumulation, no drop_last
    queue = args.num_workers * 2  # the Trainer's prefetch_factor: PyTorch's default, 2 batches per worker
    summary = {
        **speed.summary(steps_per_epoch, queue),
        "num_workers": args.num_workers,
        "steps": trainer.state.global_step,
    }
    if args.report:
        args.report.write_text(json.dumps(summary, indent=1) + "\n")
    rate = summary["steps_per_s_epochs"]
    steady = summary["steps_per_s_steady"]
    print(
        f"bench_trainer: {summary['steps']} steps, num_workers={args.num_workers}: "
        f"{'-' if rate is None else f'{rate:.2f}'} steps/s over whole epochs after the first, "
        f"{'-' if steady is None else f'{steady:.2f}'} steps/s inside them"
    )


if __name__ == "__main__":
    main()
