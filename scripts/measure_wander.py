"""Does a CPU training's speed wander with the machine, or by itself? A fixed unit of work timed beside it.

    python scripts/measure_wander.py [--unit python|copy|matmul] [--steps 4500] [--window-s 10] [-- WORKLOAD OPTIONS]

Launches the built-in workload plainly (no dlprof; default ``--batch-size 4 --max-length 128 --num-workers 0``) and,
in this process, times a fixed unit of work every 0.25 s by its thread's CPU time: ``python`` squares 20,000
integers, ``copy`` copies 8 MiB (beyond the cache), ``matmul`` multiplies 256 x 256 matrices ten times on one thread.
Prints the training's steps/s and the unit's median CPU and wall time in each window, the cores' time the hypervisor
took (steal, from ``/proc/stat``), and the correlations of the speed with 1 / the unit's CPU time and with the cores
left by steal. A unit's CPU time does not count what the host took (a stolen vCPU stops its thread's CPU clock), so
steal is read beside it; a unit whose CPU time grows with no steal ran on slower cores (measured both ways on this
project's VM: docs/validation.md#why-a-cpu-trainings-speed-wanders). Set ``OMP_NUM_THREADS`` to change the
training's intra-op threads. ``--allocator fixed`` as in scripts/bench_advice.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench_advice import FIXED_ALLOCATOR_ENV

#: Seconds between two timings of the unit (it takes about 1-2 ms: a fraction of a per cent of one core).
PERIOD_S = 0.25
DEFAULT_WORKLOAD = ["--batch-size", "4", "--max-length", "128", "--num-workers", "0"]


def _unit(kind: str) -> Callable[[], object]:
    if kind == "python":
        return lambda: sum(i * i for i in range(20_000))
    if kind == "copy":
        import numpy

        source = numpy.ones(2**20)  # 8 MiB of float64
        target = numpy.empty_like(source)
        return lambda: numpy.copyto(target, source)
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    return lambda: [torch.mm(a, b) for _ in range(10)]


def _steal_jiffies() -> tuple[int, int]:
    """The steal and total jiffies of all cores so far (``/proc/stat``'s first line; (0, 0) where it is missing)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    return fields[7], sum(fields)


def _spread_pct(values: list[float]) -> float:
    """The values' range, % of their median (0 with none)."""
    return 100 * (max(values) - min(values)) / statistics.median(values) if values else 0.0


def _correlation(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or statistics.pvariance(xs) == 0 or statistics.pvariance(ys) == 0:
        return None
    return statistics.correlation(xs, ys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", choices=("python", "copy", "matmul"), default="python")
    parser.add_argument("--steps", type=int, default=4500)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--allocator", choices=("glibc", "fixed"), default="fixed")
    parser.add_argument("workload", nargs="*", help="the built-in workload's options (after --)")
    args = parser.parse_args()
    env = dict(os.environ, **(FIXED_ALLOCATOR_ENV if args.allocator == "fixed" else {}))
    # One per timing: (when, the unit's CPU µs, its wall µs, steal jiffies so far, all jiffies so far).
    unit, samples, stop = _unit(args.unit), [], threading.Event()

    def time_the_unit() -> None:
        while not stop.is_set():
            started, wall = time.thread_time_ns(), time.perf_counter_ns()
            unit()
            cpu_us, wall_us = (time.thread_time_ns() - started) / 1e3, (time.perf_counter_ns() - wall) / 1e3
            samples.append((time.time(), cpu_us, wall_us, *_steal_jiffies()))
            time.sleep(PERIOD_S)

    threading.Thread(target=time_the_unit, daemon=True).start()
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "report.json")
        command = [sys.executable, "-m", "dlprof.workloads.lora", *(args.workload or DEFAULT_WORKLOAD)]
        subprocess.run([*command, "--steps", str(args.steps), "--report", report], check=True, env=env)
        ended = time.time()
        stop.set()
        step_ms = json.loads(Path(report).read_text())["step_ms"]
    # Each step's end, counted back from the training's end (its shut-down is a small share of a window).
    ends, at = [], ended
    for ms in reversed(step_ms):
        ends.append(at)
        at -= ms / 1000
    ends.reverse()
    speeds, units, stolen = [], [], []
    print(f"unit: {args.unit}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}")
    print(
        "| window | training steps/s | unit's CPU time (median, µs) | unit's wall time (median, µs)"
        " | cores' time stolen by the host (%) |\n|---|---|---|---|---|"
    )
    start = ends[0]
    while start + args.window_s <= ends[-1]:
        steps = sum(1 for end in ends if start <= end < start + args.window_s)
        inside = [sample[1:] for sample in samples if start <= sample[0] < start + args.window_s]
        if steps and len(inside) >= 2 and inside[-1][3] > inside[0][3]:
            speeds.append(steps / args.window_s)
            units.append(statistics.median(cpu for cpu, *_ in inside))
            stolen.append(100 * (inside[-1][2] - inside[0][2]) / (inside[-1][3] - inside[0][3]))
            wall_us = statistics.median(wall for _, wall, *_ in inside)
            print(f"| {len(speeds)} | {speeds[-1]:.2f} | {units[-1]:.0f} | {wall_us:.0f} | {stolen[-1]:.1f} |")
        start += args.window_s
    by_unit = _correlation(speeds, [1 / us for us in units])
    by_steal = _correlation(speeds, [100 - pct for pct in stolen])
    print(
        f"training's spread {_spread_pct(speeds):.1f} %, the unit's {_spread_pct(units):.1f} %, steal"
        f" {min(stolen, default=0):.1f}-{max(stolen, default=0):.1f} %; correlation with 1 / the unit's CPU time"
        f" {_said(by_unit)}, with the cores left by steal {_said(by_steal)}; {len(speeds)} windows"
    )


def _said(correlation: float | None) -> str:
    return f"{correlation:.2f}" if correlation is not None else "-"


if __name__ == "__main__":
    main()
