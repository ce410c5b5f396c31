"""Training's idle threads spinning on the workers' cores: the built-in workload with a slow tokenizer (60 ms of CPU a
sample, batch 1, 2048 tokens) and 2 workers, pinned to two cores with training's intra-op threads on both. Between
its parallel regions, and while the training thread waits for a batch, OpenMP's threads spin (the default wait
policy), taking CPU the workers need. Run it as it is to trigger the fault, with ``OMP_WAIT_POLICY=PASSIVE`` for the
control (the fix; read when torch starts, so it must be in the environment dlprof records in).

Options: --steps N (optimizer steps).
"""

import argparse
import os

import torch

from dlprof.workloads import lora

#: The cores it runs on: two, so that the 2 workers and training's 2 threads contend on any machine.
CORES = 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < CORES:
        raise SystemExit(f"spin_wait.py: needs {CORES} usable cores, this process has {len(usable)}")
    os.sched_setaffinity(0, usable[:CORES])
    torch.set_num_threads(CORES)
    lora.main(
        [
            "--batch-size",
            "1",
            "--max-length",
            "2048",
            "--tokenizer-cost-ms",
            "60",
            "--num-workers",
            "2",
            "--steps",
            str(args.steps),
        ]
    )


if __name__ == "__main__":
    main()
