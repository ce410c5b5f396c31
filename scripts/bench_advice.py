"""How good is dlprof's advice? Predicted against measured steps/s for user-style scripts with known costs.

    python scripts/bench_advice.py            # ~12 minutes on 2 cores
    python scripts/bench_advice.py --quick    # 2 cases, one measurement per count

For each case (scripts/bench_workload.py with known per-sample CPU cost, per-sample blocking I/O,
collate cost, host work and a sleep standing in for the GPU):

1. record it with ``dlprof record`` at num_workers 0 and at 2, and ``dlprof analyze`` each run;
2. measure steps/s at every num_workers 0-6 without dlprof (median of 3 runs);
3. compare each prediction with the measurement, and check that the recommendation (from either
   starting count) is within 5 % of the best measured throughput, with no more workers than needed.

Prints Markdown tables and a summary: median and 90th-percentile prediction error over all counts.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.report.report import build_report  # noqa: E402

WORKLOAD = REPO / "scripts" / "bench_workload.py"
COUNTS = range(0, 7)
#: The recommendation must reach this share of the best measured throughput.
WITHIN_BEST = 0.95

CASES = {
    # name: bench_workload.py options (per-sample cpu/io ms, per-batch collate ms, per-step host/gpu ms)
    "cpu-loading": {"cpu-ms": 3.0, "io-ms": 0.0, "collate-ms": 0.5, "host-ms": 1.0, "gpu-ms": 15.0},
    "io-loading": {"cpu-ms": 0.2, "io-ms": 8.0, "collate-ms": 0.2, "host-ms": 0.5, "gpu-ms": 8.0},
    "not-input-bound": {"cpu-ms": 0.3, "io-ms": 0.0, "collate-ms": 0.2, "host-ms": 1.0, "gpu-ms": 25.0},
    "mixed": {"cpu-ms": 1.0, "io-ms": 3.0, "collate-ms": 1.0, "host-ms": 2.0, "gpu-ms": 10.0},
    "busy-host": {"cpu-ms": 2.0, "io-ms": 0.0, "collate-ms": 0.5, "host-ms": 10.0, "gpu-ms": 2.0},
}


def workload_args(options: dict, workers: int, steps: int) -> list[str]:
    args = [str(WORKLOAD), "--num-workers", str(workers), "--steps", str(steps)]
    for key, value in options.items():
        args += [f"--{key}", str(value)]
    return args


def measure(options: dict, workers: int, steps: int, tmp: Path, repeats: int) -> float:
    """Median steps/s of ``repeats`` runs without dlprof (one run varies by a few per cent on 2 cores)."""
    report = tmp / f"measured-{workers}.json"
    rates = []
    for _ in range(repeats):
        subprocess.run([sys.executable, *workload_args(options, workers, steps), "--warmup-steps", "10", "--report", str(report)],
                       check=True, capture_output=True)  # fmt: skip
        rates.append(json.loads(report.read_text())["steps_per_s"])
    return statistics.median(rates)


def predict_from(options: dict, workers: int, tmp: Path, name: str) -> tuple[dict[int, float], int]:
    """Record at ``workers`` and analyze: predicted steps/s per count, and the recommended count."""
    done = subprocess.run(
        [sys.executable, "-m", "dlprof", "record", "--out", str(tmp), "--name", name, "--wait", "2", "--warmup", "3", "--active", "20",
         "--", "python", *workload_args(options, workers, 30), "--warmup-steps", "5"],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"dlprof record failed for {name}:\n{done.stderr}")
    advice = build_report(tmp / name).runs[0].advice
    return {p.num_workers: p.steps_per_s for p in advice.predicted}, advice.num_workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args()
    cases = dict(list(CASES.items())[:2]) if args.quick else CASES
    steps = 50 if args.quick else 70
    repeats = 1 if args.quick else 3
    errors: list[float] = []
    results = {}
    recommendation_ok = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name, options in cases.items():
            measured = {n: measure(options, n, steps, tmp, repeats) for n in COUNTS}
            predictions = {start: predict_from(options, start, tmp, f"{name}-w{start}") for start in (0, 2)}
            best = max(measured.values())
            enough = min(n for n in COUNTS if measured[n] >= WITHIN_BEST * best)
            print(f"\n### {name}: " + ", ".join(f"{k}={v}" for k, v in options.items()) + "\n")
            print("| num_workers | measured steps/s | predicted from 0 | error | predicted from 2 | error |")
            print("|---|---|---|---|---|---|")
            for n in COUNTS:
                cells = [str(n), f"{measured[n]:.2f}"]
                for start in (0, 2):
                    predicted = predictions[start][0].get(n)
                    if predicted is None:
                        cells += ["-", "-"]
                        continue
                    error = abs(predicted - measured[n]) / measured[n]
                    errors.append(error)
                    cells += [f"{predicted:.2f}", f"{100 * error:.1f} %"]
                print("| " + " | ".join(cells) + " |")
            for start in (0, 2):
                recommended = predictions[start][1]
                reached = measured[recommended] / best
                ok = reached >= WITHIN_BEST and recommended <= enough
                recommendation_ok.append(ok)
                print(f"\nfrom num_workers={start}: recommended {recommended} -> {measured[recommended]:.2f} steps/s, "
                      f"{100 * reached:.1f} % of the best measured ({best:.2f}); fewest workers within 5 %: {enough} "
                      f"-> {'OK' if ok else 'MISSED'}")  # fmt: skip
            results[name] = {"options": options, "measured": measured, "predicted": {s: p[0] for s, p in predictions.items()},
                             "recommended": {s: p[1] for s, p in predictions.items()}}  # fmt: skip
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    print(f"\n**Prediction error over {len(errors)} (case, start, count) points: median {100 * statistics.median(errors):.1f} %, "
          f"p90 {100 * p90:.1f} %. Recommendations within 5 % of the best measured with no extra workers: "
          f"{sum(recommendation_ok)}/{len(recommendation_ok)}.**")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"cases": results, "median_error": statistics.median(errors), "p90_error": p90}, indent=1))


if __name__ == "__main__":
    main()
