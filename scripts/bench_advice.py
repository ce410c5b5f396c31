"""How good is dlprof's advice? Predicted against measured steps/s, for scripts with known costs and for real models.

    python scripts/bench_advice.py                          # every case, median of 3 runs per count
    python scripts/bench_advice.py --cases lora,trainer     # the real-model cases only
    python scripts/bench_advice.py --quick --cases trainer  # one run per count, fewer counts, shorter runs

Cases:

* synthetic (``cpu-loading``, ``io-loading``, ``not-input-bound``, ``mixed``, ``busy-host``):
  scripts/bench_workload.py with known per-sample CPU cost, per-sample blocking I/O, collate cost,
  host work and a sleep standing in for the GPU. No epoch boundary is reached: a prediction's
  steady ``steps_per_s`` is compared with the measured steady rate, at every num_workers 0-6.
* ``lora``: the built-in workload (``python -m dlprof.workloads.lora``: tiny Qwen2 + LoRA, batch 4,
  tokenizing in ``__getitem__``), recorded with ``dlprof record --num-workers N`` and its defaults.
* ``trainer``: a plain Hugging Face ``Trainer`` fine-tune (scripts/bench_trainer.py), recorded with
  ``dlprof record -- python scripts/bench_trainer.py --num-workers N --epochs 3``.

The real-model cases run whole epochs (workers restart at each boundary, as PyTorch and the Trainer
do by default), so their measurement is steps/s over whole epochs after the first, from the
scripts' own ``--report``, and a prediction's ``effective_steps_per_s`` (over whole epochs when the
epoch length is known) is what is compared, at num_workers 0, 1, 2 and 4 (``--quick``: 0 and 2).

For each case:

1. record it with ``dlprof record`` at num_workers 0 and at 2, 3 times each (``--quick``: once), and
   analyze each run; a count's prediction is the median over the recordings from one start;
2. measure steps/s without dlprof at every count (and at any recommended count not among them):
   the median of 3 runs, the runs of all counts interleaved so that drifting load on the machine
   spreads over every count;
3. compare each prediction with the measurement, and check that every recording's recommendation
   reaches 95 % of the best measured throughput with no more workers than needed.

Why medians of recordings: on a shared machine, launching the same training twice gives speeds that
differ by more than the targets (one process runs 15 % faster than the next from start to end), and a
prediction anchored on one run carries that run's luck. Each case therefore also prints two error
figures that need no model: the noise floor (one measured run against the median of the other
measured runs at its count) and the error of single recordings (each recording's own predictions).

Prints, per case, a Markdown table and a summary line against the targets (every prediction within
10 %, median error at most 5 %, every recommendation within 5 % of the best), then the same over
all cases.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.workflows.analyze import build_report  # noqa: E402

WORKLOAD = REPO / "scripts" / "bench_workload.py"
TRAINER = REPO / "scripts" / "bench_trainer.py"
#: The recommendation must reach this share of the best measured throughput.
WITHIN_BEST = 0.95
#: Targets printed next to the numbers.
TARGET_MAX_ERROR = 0.10
TARGET_MEDIAN_ERROR = 0.05
#: Recording starts from these counts.
STARTS = (0, 2)
SYNTHETIC_COUNTS = tuple(range(7))
REAL_COUNTS = (0, 1, 2, 4)
#: `--quick`: the real-model cases take minutes per count (and any recommended count is measured too).
REAL_COUNTS_QUICK = (0, 2)
#: The built-in workload's batch (as `dlprof record` runs it by default).
LORA_BATCH_SIZE = 4
#: No run may hang the benchmark.
RUN_TIMEOUT_S = 1800

SYNTHETIC = {
    # name: bench_workload.py options (per-sample cpu/io ms, per-batch collate ms, per-step host/gpu ms)
    "cpu-loading": {"cpu-ms": 3.0, "io-ms": 0.0, "collate-ms": 0.5, "host-ms": 1.0, "gpu-ms": 15.0},
    "io-loading": {"cpu-ms": 0.2, "io-ms": 8.0, "collate-ms": 0.2, "host-ms": 0.5, "gpu-ms": 8.0},
    "not-input-bound": {"cpu-ms": 0.3, "io-ms": 0.0, "collate-ms": 0.2, "host-ms": 1.0, "gpu-ms": 25.0},
    "mixed": {"cpu-ms": 1.0, "io-ms": 3.0, "collate-ms": 1.0, "host-ms": 2.0, "gpu-ms": 10.0},
    "busy-host": {"cpu-ms": 2.0, "io-ms": 0.0, "collate-ms": 0.5, "host-ms": 10.0, "gpu-ms": 2.0},
}
#: `--quick` without `--cases`: the first two synthetic cases.
QUICK_DEFAULT = ("cpu-loading", "io-loading")


@dataclass(frozen=True)
class Case:
    """How to record, measure and compare one workload."""

    name: str
    description: str
    counts: tuple[int, ...]
    #: `dlprof record` arguments after `--out DIR --name NAME`, for a starting count.
    record_args: Callable[[int], list[str]]
    #: The measuring command (no dlprof) for a count, writing its JSON report to the given path.
    measure_command: Callable[[int, Path], list[str]]
    #: The measured steps/s in that report.
    measured_key: str
    #: Compare predictions over whole epochs (`effective_steps_per_s`) rather than steady state.
    whole_epochs: bool
    #: Extra report keys shown in the table (label, key).
    extra_columns: tuple[tuple[str, str], ...] = field(default=())


def synthetic_case(name: str, options: dict, quick: bool) -> Case:
    steps = 50 if quick else 70

    def workload_args(workers: int, steps: int) -> list[str]:
        args = [str(WORKLOAD), "--num-workers", str(workers), "--steps", str(steps)]
        for key, value in options.items():
            args += [f"--{key}", str(value)]
        return args

    return Case(
        name=name,
        description=", ".join(f"{k}={v}" for k, v in options.items()) + f"; {steps} steps, the first 10 excluded",
        counts=SYNTHETIC_COUNTS,
        record_args=lambda w: [
            "--wait",
            "2",
            "--warmup",
            "3",
            "--active",
            "20",
            "--reference-steps",
            "40",
            "--",
            "python",
            *workload_args(w, 70),
            "--warmup-steps",
            "5",
        ],
        measure_command=lambda w, report: [
            sys.executable,
            *workload_args(w, steps),
            "--warmup-steps",
            "10",
            "--report",
            str(report),
        ],
        measured_key="steps_per_s",
        whole_epochs=False,
    )


def lora_case(quick: bool) -> Case:
    from dlprof.workloads.lora import DEFAULT_DATASET
    from dlprof.workloads.records import load_examples

    per_epoch = math.ceil(len(load_examples(DEFAULT_DATASET)) / LORA_BATCH_SIZE)
    epochs = 2 if quick else 3  # the first is warm-up

    def measure(workers: int, report: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "dlprof.workloads.lora",
            "--batch-size",
            str(LORA_BATCH_SIZE),
            "--num-workers",
            str(workers),
            "--steps",
            str(epochs * per_epoch),
            "--report",
            str(report),
        ]

    return Case(
        name="lora",
        description=(
            f"built-in workload (tiny Qwen2 + LoRA), batch {LORA_BATCH_SIZE}; measured: {epochs} epochs of {per_epoch}"
            " steps, the first excluded"
        ),
        counts=REAL_COUNTS_QUICK if quick else REAL_COUNTS,
        record_args=lambda w: ["--num-workers", str(w), "--batch-size", str(LORA_BATCH_SIZE)],
        measure_command=measure,
        measured_key="steps_per_s_epochs",
        whole_epochs=True,
        extra_columns=(("measured steady (median step)", "steps_per_s_steady"),),
    )


def trainer_case(quick: bool) -> Case:
    epochs = 2 if quick else 3
    return Case(
        name="trainer",
        description=(
            f"Hugging Face Trainer, tiny GPT-2, batch 4 (scripts/bench_trainer.py); measured: {epochs} epochs, the"
            " first excluded"
        ),
        counts=REAL_COUNTS_QUICK if quick else REAL_COUNTS,
        record_args=lambda w: ["--", "python", str(TRAINER), "--num-workers", str(w), "--epochs", "3"],
        measure_command=lambda w, report: [
            sys.executable,
            str(TRAINER),
            "--num-workers",
            str(w),
            "--epochs",
            str(epochs),
            "--report",
            str(report),
        ],
        measured_key="steps_per_s_epochs",
        whole_epochs=True,
        extra_columns=(("measured steady (median step)", "steps_per_s_steady"),),
    )


def all_cases(quick: bool) -> dict[str, Case]:
    cases = {name: synthetic_case(name, options, quick) for name, options in SYNTHETIC.items()}
    cases["lora"] = lora_case(quick)
    cases["trainer"] = trainer_case(quick)
    return cases


def run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit code {done.returncode}):\n$ {' '.join(command)}\n{done.stderr[-4000:]}")


def measure(case: Case, counts: list[int], tmp: Path, repeats: int) -> dict[int, dict]:
    """Per count: the median measured rate (and extra columns) over ``repeats`` runs without dlprof, counts
    interleaved."""
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    for repeat in range(repeats):
        for n in counts:
            report = tmp / f"{case.name}-measured-{n}-{repeat}.json"
            run(case.measure_command(n, report), f"{case.name}: measuring num_workers={n}")
            result = json.loads(report.read_text())
            if result.get(case.measured_key) is None:
                raise SystemExit(f"{case.name}: {report} has no {case.measured_key} (too few whole epochs?): {result}")
            runs[n].append(result)
    keys = [case.measured_key, *(key for _, key in case.extra_columns)]
    return {
        n: {
            **{key: statistics.median(r[key] for r in results if r.get(key) is not None) for key in keys},
            "runs": [r[case.measured_key] for r in results],
        }
        for n, results in runs.items()
    }


def predict_from(case: Case, start: int, tmp: Path, attempt: int = 0) -> tuple[dict[int, float], int]:
    """Record at ``start`` and analyze: predicted steps/s per count, and the recommended count."""
    name = f"{case.name}-w{start}-{attempt}"
    run(
        [sys.executable, "-m", "dlprof", "record", "--out", str(tmp), "--name", name, *case.record_args(start)],
        f"dlprof record for {name}",
    )
    advice = build_report(tmp / name).runs[0].advice
    rate = (lambda p: p.effective_steps_per_s) if case.whole_epochs else (lambda p: p.steps_per_s)
    return {p.num_workers: rate(p) for p in advice.predicted}, advice.num_workers


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def summary_line(label: str, errors: list[float], recommendations: list[bool]) -> str:
    if not errors:
        return f"**{label}: no predictions to compare.**"
    worst, median = max(errors), statistics.median(errors)
    ok = sum(recommendations)
    return (
        f"**{label}: max error {pct(worst)} (target ≤ {pct(TARGET_MAX_ERROR)}:"
        f" {'met' if worst <= TARGET_MAX_ERROR else 'MISSED'}), median {pct(median)} (target ≤"
        f" {pct(TARGET_MEDIAN_ERROR)}: {'met' if median <= TARGET_MEDIAN_ERROR else 'MISSED'}) over {len(errors)}"
        f" points; recommendations within 5 % of the best measured with no extra workers: {ok}/{len(recommendations)}"
        f" (target: all{'' if ok == len(recommendations) else ', MISSED'}).**"
    )


def median_predictions(recordings: list[tuple[dict[int, float], int]]) -> dict[int, float]:
    """Per count, the median prediction over the recordings that predict it."""
    counts = sorted({n for predicted, _ in recordings for n in predicted})
    return {n: statistics.median(p[n] for p, _ in recordings if n in p) for n in counts}


def noise_floor(measured: dict[int, dict]) -> list[float]:
    """Each measured run against the median of the other runs at its count: how far one launch strays (no model
    involved)."""
    errors = []
    for result in measured.values():
        runs = result["runs"]
        for i, value in enumerate(runs):
            others = runs[:i] + runs[i + 1 :]
            if others:
                reference = statistics.median(others)
                errors.append(abs(value - reference) / reference)
    return errors


def error_stats(errors: list[float]) -> str:
    return f"max {pct(max(errors))}, median {pct(statistics.median(errors))}" if errors else "none"


def bench_case(case: Case, tmp: Path, repeats: int) -> dict:
    # Recordings of both starts interleaved, like the measurements, so that drifting load spreads over both.
    recordings: dict[int, list[tuple[dict[int, float], int]]] = {start: [] for start in STARTS}
    for attempt in range(repeats):
        for start in STARTS:
            recordings[start].append(predict_from(case, start, tmp, attempt))
    predictions = {start: median_predictions(recordings[start]) for start in STARTS}
    recommended = {start: [chosen for _, chosen in recordings[start]] for start in STARTS}
    counts = sorted(set(case.counts) | {n for chosen in recommended.values() for n in chosen})
    measured = measure(case, counts, tmp, repeats)
    rate = {n: measured[n][case.measured_key] for n in counts}
    best = max(rate.values())
    enough = min(n for n in counts if rate[n] >= WITHIN_BEST * best)
    compared = "over whole epochs (effective_steps_per_s)" if case.whole_epochs else "steady (steps_per_s)"
    print(
        f"\n### {case.name}: {case.description}\n\npredictions compared {compared}; predicted: median of {repeats}"
        f" recording(s) per start; measured: median of {repeats} run(s)\n"
    )
    header = ["num_workers", "measured steps/s", *(label for label, _ in case.extra_columns)]
    for start in STARTS:
        header += [f"predicted from {start}", "error"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    errors: list[float] = []
    for n in counts:
        cells = [str(n), f"{rate[n]:.2f}", *(f"{measured[n][key]:.2f}" for _, key in case.extra_columns)]
        for start in STARTS:
            predicted = predictions[start].get(n)
            if predicted is None:
                cells += ["-", "-"]
                continue
            error = abs(predicted - rate[n]) / rate[n]
            errors.append(error)
            cells += [f"{predicted:.2f}", pct(error)]
        print("| " + " | ".join(cells) + " |")
    recommendation_ok = []
    for start in STARTS:
        for chosen in recommended[start]:
            reached = rate[chosen] / best
            ok = reached >= WITHIN_BEST and chosen <= enough
            recommendation_ok.append(ok)
            print(
                f"\nfrom num_workers={start}: recommended {chosen} -> {rate[chosen]:.2f} steps/s, {pct(reached)} of the"
                f" best measured ({best:.2f}); fewest workers within 5 %: {enough} -> {'OK' if ok else 'MISSED'}"
            )
    single = [abs(p[n] - rate[n]) / rate[n] for start in STARTS for p, _ in recordings[start] for n in counts if n in p]
    floor = noise_floor(measured)
    print(
        f"\nnoise floor (one run without dlprof against the median of the others at its count): {error_stats(floor)}; "
        f"single recordings' errors: {error_stats(single)}"
    )
    print("\n" + summary_line(case.name, errors, recommendation_ok))
    return {
        "description": case.description,
        "compared": "effective_steps_per_s" if case.whole_epochs else "steps_per_s",
        "measured": measured,
        "predicted": predictions,
        "predicted_per_recording": {start: [p for p, _ in recordings[start]] for start in STARTS},
        "recommended": recommended,
        "errors": errors,
        "single_recording_errors": single,
        "noise_floor": floor,
        "recommendation_ok": recommendation_ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one run per count and shorter runs (without --cases: two synthetic cases)"
    )
    parser.add_argument(
        "--cases", help=f"comma-separated case names: {', '.join([*SYNTHETIC, 'lora', 'trainer'])} [default: all]"
    )
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args()
    cases = all_cases(args.quick)
    if args.cases:
        names = [name.strip() for name in args.cases.split(",") if name.strip()]
        unknown = [name for name in names if name not in cases]
        if unknown:
            parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(cases)}")
    else:
        names = list(QUICK_DEFAULT) if args.quick else list(cases)
    repeats = 1 if args.quick else 3
    results = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        for name in names:
            results[name] = bench_case(cases[name], Path(tmp_name), repeats)
    errors = [e for r in results.values() for e in r["errors"]]
    recommendations = [ok for r in results.values() for ok in r["recommendation_ok"]]
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] if ordered else None
    print("\n## Summary\n")
    print(
        "| case | points | max error | median error | recommendations OK | single recordings | noise floor"
        " |\n|---|---|---|---|---|---|---|"
    )
    for name, r in results.items():
        if r["errors"]:
            print(
                f"| {name} | {len(r['errors'])} | {pct(max(r['errors']))} | {pct(statistics.median(r['errors']))} |"
                f" {sum(r['recommendation_ok'])}/{len(r['recommendation_ok'])} |"
                f" {error_stats(r['single_recording_errors'])} | {error_stats(r['noise_floor'])} |"
            )
    print(
        "\n"
        + summary_line(f"all {len(results)} case(s)", errors, recommendations)
        + (f" p90 error {pct(p90)}." if p90 is not None else "")
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cases": results,
                    "repeats": repeats,
                    "quick": args.quick,
                    "max_error": max(errors) if errors else None,
                    "median_error": statistics.median(errors) if errors else None,
                    "p90_error": p90,
                    "recommendations_ok": sum(recommendations),
                    "recommendations": len(recommendations),
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
