"""How long must a speed be timed to be right? Step-time variation of real and synthetic training, without dlprof.

    python scripts/measure_variation.py                       # every workload (~15 minutes on 2 cores)
    python scripts/measure_variation.py --runs io-bound@2,lora@2 --seconds 40 --json variation.json

Trains long stretches of each workload WITHOUT dlprof and records every step's wall time and data wait:

* the synthetic ones of scripts/bench_workload.py (``io-bound``: 15 ms of blocking read per sample, batch 4,
  a 20 ms accelerator step, the issue's case; ``io-heavy``: 30 ms per sample; ``cpu-bound``: 8 ms of CPU per
  sample), with the main process standing still for ``--pause-ms`` every ``--pause-every`` steps, as the
  profiler's export does (the workers fill the prefetch queue meanwhile);
* the built-in LoRA workload (``python -m dlprof.workloads.lora --report``), whose pauses are its epoch starts
  (workers restart and the queue refills from empty).

Then, per run:

1. **Windows.** The long-run rate is all steady steps over their time (every pause's first
   ``--settle`` steps left out, far more than any transient). The steady steps are cut into consecutive windows
   of at least n steps and t seconds; each window's rate is set against the long-run rate (median and p90
   of |window / long-run - 1|), and against the next window's (how far two windows differ).
2. **The transient after a pause.** After each pause, the rate of the first steps is set against the
   long-run rate, leaving out nothing, a queue's worth (``num_workers × prefetch_factor`` batches), the steps
   up to the first that waited, or what :func:`dlprof.core.throughput.transient_steps` leaves out (up to a wait
   per worker); and how many steps that rule leaves out.
3. **N and T.** For every (N, T) of a grid, the worst p90 deviation over the runs: the smallest N and T
   that keep every run within :data:`TARGET_PCT` are what :data:`dlprof.core.throughput.MIN_STEPS` and
   :data:`~dlprof.core.throughput.MIN_SECONDS` should be.

The machine may be shared: the load average is printed with every run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.core import throughput  # noqa: E402
from dlprof.core.manifest import EPOCH_SETTLE_STEPS  # noqa: E402

WORKLOAD = REPO / "scripts" / "bench_workload.py"
#: bench_workload.py options of the synthetic workloads (per-sample cpu/io ms, per-batch collate ms, per-step
#: host/gpu ms).
SYNTHETIC = {
    "io-bound": {"cpu-ms": 0.2, "io-ms": 15.0, "collate-ms": 0.2, "host-ms": 1.0, "gpu-ms": 20.0},
    "io-heavy": {"cpu-ms": 0.2, "io-ms": 30.0, "collate-ms": 0.2, "host-ms": 1.0, "gpu-ms": 20.0},
    "cpu-bound": {"cpu-ms": 8.0, "io-ms": 0.0, "collate-ms": 1.0, "host-ms": 2.0, "gpu-ms": 8.0},
}
DEFAULT_RUNS = "io-bound@2,io-bound@4,io-bound@0,io-heavy@2,cpu-bound@2,lora@2,lora@0"
#: A window's rate should come within this of the long-run rate at p90, %.
TARGET_PCT = 3.0
#: The grid of (N steps, T seconds) tried.
GRID_STEPS = (10, 20, 40, 60, 80, 120, 160)
GRID_SECONDS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
#: The built-in workload's batch and steps per epoch (its bundled data set).
LORA_BATCH_SIZE = 4
PREFETCH_FACTOR = 2
RUN_TIMEOUT_S = 1800


@dataclass
class Run:
    """One training stretch: every step's wall time and wait (ms), and where each pause ended (a step index)."""

    name: str
    num_workers: int
    wall_ms: list[float]
    wait_ms: list[float]
    #: Steps that began right after a pause; the first is 0 (the start).
    starts: list[int]
    #: Steps left out after every pause for the long-run rate.
    settle: int
    #: Segments to leave out whole (the LoRA workload's first epoch: warm-up).
    skip_segments: int = 0

    @property
    def queue(self) -> int:
        return throughput.queue_steps(self.num_workers, PREFETCH_FACTOR)

    def segments(self) -> list[tuple[int, int]]:
        bounds = [*self.starts, len(self.wall_ms)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a][self.skip_segments :]

    def steady(self) -> list[float]:
        """Every segment's steps after its first ``settle``, in whole rounds of the workers' delivery."""
        period = max(1, self.num_workers)
        kept = [self.wall_ms[a + self.settle : b] for a, b in self.segments()]
        return [ms for steps in kept for ms in steps[: throughput.whole_periods(len(steps), period)]]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_synthetic(name: str, workers: int, seconds: float, pause_every: int, pause_ms: float, tmp: Path) -> Run:
    report = tmp / f"{name}-{workers}.json"
    command = [sys.executable, str(WORKLOAD), "--num-workers", str(workers), "--steps", "1000000"]
    for key, value in SYNTHETIC[name].items():
        command += [f"--{key}", str(value)]
    command += ["--pause-every", str(pause_every), "--pause-ms", str(pause_ms), "--max-seconds", str(seconds)]
    command += ["--warmup-steps", "0", "--report", str(report)]
    subprocess.run(command, check=True, timeout=RUN_TIMEOUT_S, cwd=REPO, capture_output=True)
    data = json.loads(report.read_text())
    starts = [0] + [p + 1 for p in data["paused_after"]]
    return Run(f"{name}@{workers}", workers, data["step_ms"], data["wait_ms"], starts, settle=60)


def run_lora(workers: int, epochs: int, tmp: Path) -> Run:
    from dlprof.workloads.lora import DEFAULT_DATASET
    from dlprof.workloads.records import load_examples

    per_epoch = math.ceil(len(load_examples(DEFAULT_DATASET)) / LORA_BATCH_SIZE)
    report = tmp / f"lora-{workers}.json"
    command = [sys.executable, "-m", "dlprof.workloads.lora", "--num-workers", str(workers)]
    command += ["--batch-size", str(LORA_BATCH_SIZE), "--steps", str(epochs * per_epoch), "--report", str(report)]
    subprocess.run(command, check=True, timeout=RUN_TIMEOUT_S, cwd=REPO, capture_output=True)
    data = json.loads(report.read_text())
    epoch_of = data["step_epoch"]
    starts = [i for i, e in enumerate(epoch_of) if i == 0 or e != epoch_of[i - 1]]
    queue = throughput.queue_steps(workers, PREFETCH_FACTOR)
    return Run(f"lora@{workers}", workers, data["step_ms"], data["wait_ms"], starts, EPOCH_SETTLE_STEPS + 2 * queue, 1)


def windows(steps: list[float], n: int, t_s: float, period: int = 1) -> list[float]:
    """Rates of consecutive windows of at least ``n`` steps and ``t_s`` seconds, each whole rounds of ``period``
    steps, as dlprof times them (the last, short one dropped)."""
    rates, count, total = [], 0, 0.0
    for ms in steps:
        count += 1
        total += ms
        if count >= n and total >= 1000 * t_s and count % period == 0:
            rates.append(1000 * count / total)
            count, total = 0, 0.0
    return rates


def pctl(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else math.nan


def window_stats(steps: list[float], rate: float, n: int, t_s: float, period: int) -> dict:
    rates = windows(steps, n, t_s, period)
    off = [100 * abs(r / rate - 1) for r in rates]
    pairs = [100 * abs(a - b) / rate for a, b in zip(rates, rates[1:])]
    return {
        "windows": len(rates),
        "p50_pct": statistics.median(off) if off else math.nan,
        "p90_pct": pctl(off, 0.9),
        "pairs_p50_pct": statistics.median(pairs) if pairs else math.nan,
        "pairs_p90_pct": pctl(pairs, 0.9),
    }


def trust_stats(steady: list[float], rate: float, period: int) -> dict:
    """Measurements as dlprof makes them (:func:`dlprof.core.throughput.measure` over consecutive stretches of at least
    :data:`~dlprof.core.throughput.MIN_STEPS` steps and :data:`~dlprof.core.throughput.MIN_SECONDS`): how many are
    trusted
    (spread within :data:`~dlprof.core.throughput.MAX_SPREAD_PCT`), and their error against the long run, trusted or
    not (p90 of |measured / long-run - 1|, %)."""
    trusted, distrusted, stretch = [], [], []
    for ms in steady:
        stretch.append(ms)
        if throughput.enough(len(stretch), sum(stretch) / 1000) and len(stretch) % period == 0:
            speed = throughput.measure(stretch, period=period)
            (trusted if speed.trusted else distrusted).append(100 * abs(speed.steps_per_s / rate - 1))
            stretch = []
    return {
        "measurements": len(trusted) + len(distrusted),
        "trusted": len(trusted),
        "trusted_p90_pct": pctl(trusted, 0.9),
        "distrusted_p90_pct": pctl(distrusted, 0.9),
    }


def transient_stats(run: Run, rate: float, window: int) -> dict:
    """After each pause (not the start): the rule's transient, and the first steps' rate against the long run."""
    rule, first6, raw, after_queue, after_first, after_rule = [], [], [], [], [], []
    for a, b in run.segments():
        if a == 0:
            continue
        wall, wait = run.wall_ms[a:b], run.wait_ms[a:b]
        k = throughput.transient_steps(wall, wait, run.queue, run.num_workers)  # a wait per worker
        first = throughput.transient_steps(wall, wait, run.queue)  # the first wait
        rule.append(k)
        bias = lambda skip, n=window, wall=wall: 100 * (1000 * n / sum(wall[skip : skip + n]) / rate - 1)
        if len(wall) >= 6:
            first6.append(bias(0, 6))
        for skip, into in ((0, raw), (run.queue, after_queue), (first, after_first), (k, after_rule)):
            if skip + window <= len(wall):
                into.append(bias(skip))
    mean = lambda xs: statistics.fmean(xs) if xs else math.nan
    return {
        "pauses": len(rule),
        "queue": run.queue,
        "rule_mean": mean(rule),
        "rule_max": max(rule, default=0),
        "bias_first6_pct": mean(first6),
        "bias_raw_pct": mean(raw),
        "bias_after_queue_pct": mean(after_queue),
        "bias_after_first_wait_pct": mean(after_first),
        "bias_after_rule_pct": mean(after_rule),
        "bias_after_rule_max_pct": max(after_rule, key=abs, default=math.nan),
    }


def wait_stats(run: Run) -> dict:
    """In steady state: the hand-off of a ready batch against the rule's threshold."""
    steady_wait = [w for a, b in run.segments() for w in run.wait_ms[a + run.settle : b]]
    steady = run.steady()
    if not steady_wait:
        return {}
    threshold = min(steady_wait) + throughput.WAITED_SHARE * statistics.median(steady)
    return {
        "min_wait_ms": min(steady_wait),
        "threshold_ms": threshold,
        "above_threshold_share": sum(w > threshold for w in steady_wait) / len(steady_wait),
        "wait_p50_ms": statistics.median(steady_wait),
    }


def analyse(run: Run, transient_window: int) -> dict:
    steady = run.steady()
    rate = 1000 * len(steady) / sum(steady)
    period = max(1, run.num_workers)
    grid = {f"{n},{t:g}": window_stats(steady, rate, n, t, period) for n in (1, *GRID_STEPS) for t in GRID_SECONDS}
    return {
        "name": run.name,
        "num_workers": run.num_workers,
        "steps": len(run.wall_ms),
        "steady_steps": len(steady),
        "seconds": sum(steady) / 1000,
        "rate": rate,
        "mean_over_median": statistics.fmean(steady) / statistics.median(steady),
        "median_rate": 1000 / statistics.median(steady),
        "grid": grid,
        "transient": transient_stats(run, rate, transient_window),
        "trust": trust_stats(steady, rate, period),
        "wait": wait_stats(run),
    }


def fmt(x: float, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_tables(results: list[dict]) -> tuple[int, float]:
    print("\n## Runs\n")
    print("| run | steps (steady) | steady s | steps/s (steps over time) | 1000 / median step | load |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['name']} | {r['steps']} ({r['steady_steps']}) | {r['seconds']:.1f} | {r['rate']:.2f} |"
            f" {r['median_rate']:.2f} ({100 * (r['median_rate'] / r['rate'] - 1):+.1f} %) | {r['load']} |"
        )
    print("\n## Windows of n steps (any time) and of t seconds (any steps): |window / long-run - 1|, p50 / p90 %\n")
    cells = [f"n={n}" for n in GRID_STEPS] + [f"t={t:g}s" for t in GRID_SECONDS if t]
    print("| run | " + " | ".join(cells) + " |\n|---|" + "---|" * len(cells))
    for r in results:
        row = [r["grid"][f"{n},0"] for n in GRID_STEPS] + [r["grid"][f"1,{t:g}"] for t in GRID_SECONDS if t]
        print(f"| {r['name']} | " + " | ".join(f"{fmt(c['p50_pct'])} / {fmt(c['p90_pct'])}" for c in row) + " |")
    print("\n## Two adjacent windows: |a - b| / long-run, p50 / p90 %\n")
    print("| run | " + " | ".join(cells) + " |\n|---|" + "---|" * len(cells))
    for r in results:
        row = [r["grid"][f"{n},0"] for n in GRID_STEPS] + [r["grid"][f"1,{t:g}"] for t in GRID_SECONDS if t]
        print(
            f"| {r['name']} | "
            + " | ".join(f"{fmt(c['pairs_p50_pct'])} / {fmt(c['pairs_p90_pct'])}" for c in row)
            + " |"
        )
    return print_choice(results)


def print_choice(results: list[dict]) -> tuple[int, float]:
    print(f"\n## At least N steps and T seconds: the worst p90 over the runs, % (target ≤ {TARGET_PCT:g} %)\n")
    print("| N \\ T | " + " | ".join(f"{t:g} s" for t in GRID_SECONDS) + " |\n|---|" + "---|" * len(GRID_SECONDS))
    best = None
    for n in GRID_STEPS:
        worst = []
        for t in GRID_SECONDS:
            p90s = [r["grid"][f"{n},{t:g}"]["p90_pct"] for r in results]
            value = max(p90s) if not any(math.isnan(p) for p in p90s) else math.nan
            worst.append(value)
            # The cost of a choice: the longest any run must be timed to meet it.
            cost = max(max(n / r["rate"], t) for r in results)
            if value <= TARGET_PCT and (best is None or cost < best[0]):
                best = (cost, n, t)
        print(f"| {n} | " + " | ".join(fmt(w) for w in worst) + " |")
    if best is None:
        print("\nno (N, T) of the grid meets the target on every run")
        return 0, math.nan
    print(f"\nsmallest that meets it: N={best[1]}, T={best[2]:g} s (the slowest run needs {best[0]:.1f} s)")
    return best[1], best[2]


def print_transients(results: list[dict], window: int) -> None:
    print(
        f"\n## After a pause (synthetic: the main process stood still; lora: an epoch start): the rate of {window}"
        " steps against the long run, signed %, mean over pauses\n"
    )
    print(
        "| run | pauses | queue | rule's transient: mean (max) | first 6 steps | no step left out |"
        " a queue left out | to the first wait | the rule's left out (worst) |"
        " steady: median wait / threshold ms, waits above |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        t, w = r["transient"], r["wait"]
        waits = (
            f"{fmt(w.get('wait_p50_ms'), '.2f')} / {fmt(w.get('threshold_ms'), '.2f')},"
            f" {fmt(100 * w.get('above_threshold_share', math.nan), '.0f')} %"
        )
        print(
            f"| {r['name']} | {t['pauses']} | {t['queue']} | {fmt(t['rule_mean'])} ({t['rule_max']}) |"
            f" {fmt(t['bias_first6_pct'], '+.1f')} | {fmt(t['bias_raw_pct'], '+.1f')} |"
            f" {fmt(t['bias_after_queue_pct'], '+.1f')} | {fmt(t['bias_after_first_wait_pct'], '+.1f')} |"
            f" {fmt(t['bias_after_rule_pct'], '+.1f')}"
            f" ({fmt(t['bias_after_rule_max_pct'], '+.1f')}) | {waits} |"
        )


def print_trust(results: list[dict]) -> None:
    print(
        f"\n## Measured as dlprof does (at least {throughput.MIN_STEPS} steps and {throughput.MIN_SECONDS:g} s, whole"
        f" rounds): trusted when the spread of {throughput.SUB_WINDOWS} parts is within"
        f" {throughput.MAX_SPREAD_PCT:g} %; p90 of |measured / long-run - 1|\n"
    )
    print("| run | measurements | trusted | p90 error, trusted | p90 error, not trusted |\n|---|---|---|---|---|")
    for r in results:
        t = r["trust"]
        print(
            f"| {r['name']} | {t['measurements']} | {t['trusted']} | {fmt(t['trusted_p90_pct'])} % |"
            f" {fmt(t['distrusted_p90_pct'])} % |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"workload@num_workers, comma-separated [{DEFAULT_RUNS}]")
    parser.add_argument("--seconds", type=float, default=75.0, help="length of each synthetic run")
    parser.add_argument("--lora-epochs", type=int, default=16, help="epochs of each LoRA run (the first is warm-up)")
    parser.add_argument("--pause-every", type=int, default=250, help="synthetic: steps between pauses")
    parser.add_argument("--pause-ms", type=float, default=1000.0, help="synthetic: how long each pause lasts")
    parser.add_argument("--transient-window", type=int, default=throughput.MIN_STEPS, help="steps timed after a pause")
    parser.add_argument("--json", type=Path, help="write every number (and every step) here")
    parser.add_argument(
        "--from-json", type=Path, nargs="+", help="analyse the runs stored by earlier --json files instead of training"
    )
    args = parser.parse_args()
    results, runs = [], []
    for path in args.from_json or ():
        stored = json.loads(path.read_text())
        for fields, earlier in zip(stored["runs"], stored["results"]):
            run = Run(**fields)
            results.append({**analyse(run, args.transient_window), "load": earlier["load"]})
            runs.append(run)
    with tempfile.TemporaryDirectory() as tmp_name:
        for spec in args.runs.split(",") if not args.from_json else ():
            name, _, workers = spec.strip().partition("@")
            workers = int(workers or 2)
            before = load()
            if name == "lora":
                run = run_lora(workers, args.lora_epochs, Path(tmp_name))
            elif name in SYNTHETIC:
                run = run_synthetic(name, workers, args.seconds, args.pause_every, args.pause_ms, Path(tmp_name))
            else:
                parser.error(f"unknown workload {name!r}: choose from {', '.join([*SYNTHETIC, 'lora'])}")
            result = analyse(run, args.transient_window)
            result["load"] = f"{before} -> {load()}"
            print(f"{run.name}: {result['rate']:.2f} steps/s over {result['steady_steps']} steady steps", flush=True)
            results.append(result)
            runs.append(run)
    n, t = print_tables(results)
    print_transients(results, args.transient_window)
    print_trust(results)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"results": results, "choice": {"steps": n, "seconds": t}, "runs": [vars(r) for r in runs]}, indent=1
            )
        )


if __name__ == "__main__":
    main()
