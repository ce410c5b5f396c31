"""How much busy processes beside it hold a CPU training back, against the throughput model's sharing.

    python scripts/measure_contention.py [--burn tokenizer|python] [--busy 0,1,2,4] [--rounds 2] [--steps 30]

Trains the claim check's model (the built-in tiny Qwen2 + LoRA, batch 1, up to 2048 tokens) on batches made
beforehand, alone and beside ``k`` processes that keep a core busy the whole time, as DataLoader workers that never
run out of work do: ``tokenizer`` burns CPU as the workload's ``--tokenizer-cost-ms`` does (reading the thread's CPU
clock in a loop), ``python`` in a pure-Python loop. Rounds interleave the counts. Prints the median step at each
count, the training's speed (alone / beside k) by the median step and by the mean one (what throughput sees: a busy
process holds some steps back for whole time slices) and what ``dlprof.advice.model.shared_cores`` assumes for the
training's threads on this machine's cores: the term that predicts the step with workers from a window without
them (docs/validation.md#the-model-under-contention).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from dlprof.advice.model import shared_cores  # noqa: E402
from dlprof.workloads import lora, sft  # noqa: E402

#: CPU ms per unit of a ``tokenizer`` burner's work, as the workload's slow tokenizer spends per sample.
BURN_MS = 60.0


def _burn(kind: str, stop) -> None:
    while not stop.is_set():
        if kind == "tokenizer":
            sft.burn_cpu(BURN_MS)
        else:
            sum(i * i for i in range(20_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burn", choices=("tokenizer", "python"), default="tokenizer")
    parser.add_argument("--busy", default="0,1,2,4", help="busy processes beside the training, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="steps timed per count and round")
    args = parser.parse_args()
    counts = [int(c) for c in args.busy.split(",")]
    options = lora.parse_args(["--batch-size", "1", "--max-length", "2048", "--steps", "1"])
    tokenizer = lora.load_tokenizer(options)
    model = lora.build_model(options, tokenizer, "cpu")
    model.train()
    dataset = sft.SupervisedDataset(lora.load_examples(lora.DEFAULT_DATASET), tokenizer, options.max_length)
    collate = sft.PadCollator(tokenizer.pad_token_id)
    batches = [collate([dataset[i]]) for i in range(args.steps)]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lora.LEARNING_RATE)

    def step_ms(batch: dict) -> float:
        started = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return 1000 * (time.perf_counter() - started)

    for batch in batches[:5]:  # warm-up
        step_ms(batch)
    fork = multiprocessing.get_context("fork")
    medians: dict[int, list[float]] = {k: [] for k in counts}
    means: dict[int, list[float]] = {k: [] for k in counts}
    for round_ in range(args.rounds):
        for k in counts if round_ % 2 == 0 else reversed(counts):
            stop = fork.Event()
            burners = [fork.Process(target=_burn, args=(args.burn, stop)) for _ in range(k)]
            for burner in burners:
                burner.start()
            time.sleep(0.3)  # every burner busy
            steps = [step_ms(batch) for batch in batches]
            medians[k].append(statistics.median(steps))
            means[k].append(statistics.fmean(steps))
            stop.set()
            for burner in burners:
                burner.join()
    cores = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    alone = statistics.median(medians[counts[0]]) if counts[0] == 0 else None
    alone_mean = statistics.median(means[counts[0]]) if counts[0] == 0 else None
    print(f"{cores} usable cores, {threads} intra-op threads, burner: {args.burn}, {args.rounds} rounds")
    print("| busy beside it | median step ms (each round) | speed by median | speed by mean | model's speed |")
    print("|---|---|---|---|---|")
    for k in counts:
        median = statistics.median(medians[k])
        speed = f"{alone / median:.3f}" if alone else "-"
        by_mean = f"{alone_mean / statistics.median(means[k]):.3f}" if alone_mean else "-"
        model = shared_cores(cores, min(threads, cores), k)[0]
        each = ", ".join(f"{m:.1f}" for m in medians[k])
        print(f"| {k} | {median:.1f} ({each}) | {speed} | {by_mean} | {model:.3f} |")


if __name__ == "__main__":
    main()
