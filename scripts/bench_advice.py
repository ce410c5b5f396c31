"""How good is dlprof's advice? Predicted against measured steps/s, for scripts with known costs and for real models.

    python scripts/bench_advice.py                          # every case, median of 3 runs per count
    python scripts/bench_advice.py --cases lora,trainer     # the real-model cases only
    python scripts/bench_advice.py --quick --cases trainer  # one run per count, fewer counts, shorter runs

Cases:

* synthetic (``cpu-loading``, ``io-loading``, ``not-input-bound``, ``mixed``, ``busy-host``, and the
  I/O-bound loaders of issue 13: ``io-bound``, 15 ms of blocking read per sample and a 20 ms
  accelerator step, and ``io-heavy``, 30 ms per sample): scripts/bench_workload.py with known
  per-sample CPU cost, per-sample blocking I/O, collate cost, host work and a sleep standing in for
  the GPU. No epoch boundary is reached: a prediction's steady ``steps_per_s`` is compared with the
  measured steady rate (steps over time after the first 20), at every num_workers 0-6.
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
   spreads over every count (at the recorded counts, each run right after a recording);
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

Besides the model, each case checks the measurement it rests on: the report's unprofiled speed at the
recorded count (``dlprof analyze``'s steady reference steps over their time; for the real-model cases
also the speed over whole epochs) against the truth measured without dlprof at that count (separate
launches, median of 3), target within 5 %. ``--unprofiled-only`` measures the truth at the recorded
counts only and skips the model's tables: the measurement's check alone, in a fraction of the time.
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
    # Issue 13's hidden scripts: the export pause leaves the prefetch queue full and the steps alternate.
    "io-bound": {"cpu-ms": 0.2, "io-ms": 15.0, "collate-ms": 0.2, "host-ms": 1.0, "gpu-ms": 20.0},
    "io-heavy": {"cpu-ms": 0.2, "io-ms": 30.0, "collate-ms": 0.2, "host-ms": 1.0, "gpu-ms": 20.0},
}
#: The report's unprofiled speed must come this close to the truth measured without dlprof.
TARGET_UNPROFILED_ERROR = 0.05
#: Synthetic truth: steps run without dlprof, the first excluded (start-up); recorded: steps the script would run
#: (dlprof stops it once the window and the reference steps are done).
SYNTHETIC_STEPS, SYNTHETIC_STEPS_QUICK, SYNTHETIC_WARMUP = 200, 100, 20
SYNTHETIC_RECORDED_STEPS = 1000
#: The real-model cases' unprofiled speeds against their truth: inside an epoch and over whole epochs.
REAL_UNPROFILED_CHECKS = (
    ("inside an epoch", "steps_per_s_steady", "steps_per_s"),
    ("over whole epochs", "steps_per_s_epochs", "epoch_steps_per_s"),
)
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
    #: The report's unprofiled speeds checked against the truth: (basis, truth key in the measuring report,
    #: UnprofiledStats attribute).
    unprofiled_checks: tuple[tuple[str, str, str], ...] = (("inside an epoch", "steps_per_s", "steps_per_s"),)


def synthetic_case(name: str, options: dict, quick: bool) -> Case:
    steps = SYNTHETIC_STEPS_QUICK if quick else SYNTHETIC_STEPS

    def workload_args(workers: int, steps: int) -> list[str]:
        args = [str(WORKLOAD), "--num-workers", str(workers), "--steps", str(steps)]
        for key, value in options.items():
            args += [f"--{key}", str(value)]
        return args

    return Case(
        name=name,
        description=", ".join(f"{k}={v}" for k, v in options.items())
        + f"; {steps} steps, the first {SYNTHETIC_WARMUP} excluded",
        counts=SYNTHETIC_COUNTS,
        # dlprof record's defaults but a shorter start: the recorder stops the script after the window and the
        # reference steps.
        record_args=lambda w: [
            "--wait",
            "2",
            "--warmup",
            "3",
            "--active",
            "20",
            "--",
            "python",
            *workload_args(w, SYNTHETIC_RECORDED_STEPS),
            "--warmup-steps",
            "5",
        ],
        measure_command=lambda w, report: [
            sys.executable,
            *workload_args(w, steps),
            "--warmup-steps",
            str(SYNTHETIC_WARMUP),
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
        extra_columns=(("measured inside an epoch", "steps_per_s_steady"),),
        unprofiled_checks=REAL_UNPROFILED_CHECKS,
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
        extra_columns=(("measured inside an epoch", "steps_per_s_steady"),),
        unprofiled_checks=REAL_UNPROFILED_CHECKS,
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


def measure_once(case: Case, n: int, tmp: Path, repeat: int) -> dict:
    """One launch without dlprof at ``n`` workers: its report."""
    report = tmp / f"{case.name}-measured-{n}-{repeat}.json"
    run(case.measure_command(n, report), f"{case.name}: measuring num_workers={n}")
    result = json.loads(report.read_text())
    if result.get(case.measured_key) is None:
        raise SystemExit(f"{case.name}: {report} has no {case.measured_key} (too few whole epochs?): {result}")
    return result


def measure(case: Case, counts: list[int], tmp: Path, repeats: int) -> dict[int, list[dict]]:
    """Per count: ``repeats`` launches without dlprof, counts interleaved."""
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    for repeat in range(repeats):
        for n in counts:
            runs[n].append(measure_once(case, n, tmp, repeat))
    return runs


def summarize(case: Case, runs: dict[int, list[dict]]) -> dict[int, dict]:
    """Per count: the median of each measured key over its launches, and every launch's values."""
    keys = {case.measured_key, *(key for _, key in case.extra_columns), *(key for _, key, _ in case.unprofiled_checks)}
    median = lambda values: statistics.median(values) if values else None
    return {
        n: {
            **{key: median([r[key] for r in results if r.get(key) is not None]) for key in keys},
            "runs": [r[case.measured_key] for r in results],
            "runs_by_key": {key: [r.get(key) for r in results] for key in keys},
        }
        for n, results in sorted(runs.items())
    }


def predict_from(case: Case, start: int, tmp: Path, attempt: int = 0) -> tuple[dict[int, float], int, dict]:
    """Record at ``start`` and analyze: predicted steps/s per count, the recommended count, and the report's
    unprofiled speed (each checked attribute, its spread, whether trusted, its steady and left-out steps)."""
    name = f"{case.name}-w{start}-{attempt}"
    run(
        [sys.executable, "-m", "dlprof", "record", "--out", str(tmp), "--name", name, *case.record_args(start)],
        f"dlprof record for {name}",
    )
    report = build_report(tmp / name).runs[0]
    advice, u = report.advice, report.unprofiled
    rate = (lambda p: p.effective_steps_per_s) if case.whole_epochs else (lambda p: p.steps_per_s)
    unprofiled = {}
    if u is not None:
        unprofiled = {attr: getattr(u, attr) for _, _, attr in case.unprofiled_checks}
        unprofiled.update(
            spread_pct=u.speed.spread_pct if u.speed else None,
            trusted=u.speed.trusted if u.speed else None,
            steps=u.reference_steps,
            left_out=u.speed.transient_steps if u.speed else None,
            seconds=u.speed.seconds if u.speed else None,
        )
    return {p.num_workers: rate(p) for p in advice.predicted}, advice.num_workers, unprofiled


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


def median_predictions(recordings: list[tuple[dict[int, float], int, dict]]) -> dict[int, float]:
    """Per count, the median prediction over the recordings that predict it."""
    counts = sorted({n for predicted, _, _ in recordings for n in predicted})
    return {n: statistics.median(p[n] for p, _, _ in recordings if n in p) for n in counts}


def noise_floor(measured: dict[int, dict], key: str | None = None) -> list[float]:
    """Each measured run against the median of the other runs at its count: how far one launch strays (no model
    involved); of ``key`` (default: the case's measured key)."""
    errors = []
    for result in measured.values():
        runs = result["runs"] if key is None else [r for r in result["runs_by_key"].get(key, []) if r is not None]
        for i, value in enumerate(runs):
            others = runs[:i] + runs[i + 1 :]
            if others:
                reference = statistics.median(others)
                errors.append(abs(value - reference) / reference)
    return errors


def error_stats(errors: list[float]) -> str:
    return f"max {pct(max(errors))}, median {pct(statistics.median(errors))}" if errors else "none"


def unprofiled_check(case: Case, recordings: dict[int, list[tuple]], measured: dict[int, dict]) -> list[dict]:
    """The report's unprofiled speed at each recorded count against the truth without dlprof at that count: a
    Markdown table, and one row per (count, basis) with the median recording's error and the worst single one."""
    print(
        "\nunprofiled speed at the recorded count (dlprof analyze: steady reference steps over their time) against the"
        f" truth without dlprof (median of {len(next(iter(measured.values()))['runs'])} launches); target within"
        f" {pct(TARGET_UNPROFILED_ERROR)}\n"
    )
    print(
        "| recorded at | basis | truth steps/s | dlprof steps/s (median) | error | each recording | worst |"
        " steady steps (left out) | spread | trusted |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for start in STARTS:
        reports = [u for _, _, u in recordings[start]]
        for basis, truth_key, attr in case.unprofiled_checks:
            truth = measured[start].get(truth_key)
            values = [u.get(attr) for u in reports if u.get(attr) is not None]
            if truth is None or not values:
                print(f"| {start} | {basis} | {fmt(truth)} | - | - | - | - | - | - | - |")
                continue
            errors = [(v - truth) / truth for v in values]
            median = statistics.median(values)
            row = {
                "recorded_at": start,
                "basis": basis,
                "truth": truth,
                "dlprof": values,
                "error": (median - truth) / truth,
                "worst": max(errors, key=abs),
            }
            rows.append(row)
            steps = ", ".join(f"{u.get('steps')} ({u.get('left_out')})" for u in reports)
            spreads = ", ".join(f"{fmt(u.get('spread_pct'), '.0f')} %" for u in reports)
            print(
                f"| {start} | {basis} | {truth:.2f} | {median:.2f} | {row['error'] * 100:+.1f} % |"
                f" {', '.join(f'{v:.2f}' for v in values)} | {row['worst'] * 100:+.1f} % | {steps} | {spreads} |"
                f" {sum(bool(u.get('trusted')) for u in reports)}/{len(reports)} |"
            )
    floors = {basis: noise_floor(measured, key) for basis, key, _ in case.unprofiled_checks}
    print(
        "\nnoise floor of the truth (one launch against the median of the others at its count): "
        + "; ".join(f"{basis}: {error_stats(floor)}" for basis, floor in floors.items())
    )
    return rows


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def prediction_table(case: Case, recordings: dict[int, list[tuple]], measured: dict[int, dict], counts) -> dict:
    """The model's predictions against the measurement, and the recommendations; prints the case's tables."""
    repeats = len(next(iter(recordings.values())))
    predictions = {start: median_predictions(recordings[start]) for start in STARTS}
    recommended = {start: [chosen for _, chosen, _ in recordings[start]] for start in STARTS}
    rate = {n: measured[n][case.measured_key] for n in counts}
    best = max(rate.values())
    enough = min(n for n in counts if rate[n] >= WITHIN_BEST * best)
    compared = "over whole epochs (effective_steps_per_s)" if case.whole_epochs else "steady (steps_per_s)"
    print(f"\npredictions compared {compared}; predicted: median of {repeats} recording(s) per start\n")
    header = ["num_workers", "measured steps/s", *(label for label, _ in case.extra_columns)]
    for start in STARTS:
        header += [f"predicted from {start}", "error"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    errors: list[float] = []
    for n in counts:
        cells = [str(n), f"{rate[n]:.2f}", *(fmt(measured[n][key]) for _, key in case.extra_columns)]
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
    single = [
        abs(p[n] - rate[n]) / rate[n] for start in STARTS for p, _, _ in recordings[start] for n in counts if n in p
    ]
    print(f"\nsingle recordings' errors: {error_stats(single)}")
    print("\n" + summary_line(case.name, errors, recommendation_ok))
    return {
        "predicted": predictions,
        "predicted_per_recording": {start: [p for p, _, _ in recordings[start]] for start in STARTS},
        "recommended": recommended,
        "errors": errors,
        "single_recording_errors": single,
        "recommendation_ok": recommendation_ok,
    }


def bench_case(case: Case, tmp: Path, repeats: int, unprofiled_only: bool = False) -> dict:
    # Each recording is followed by a launch without dlprof at its count, and the starts alternate: drifting load
    # on the machine (other processes) falls on the recordings and their truth alike.
    recordings: dict[int, list[tuple]] = {start: [] for start in STARTS}
    runs: dict[int, list[dict]] = {start: [] for start in STARTS}
    for attempt in range(repeats):
        for start in STARTS:
            recordings[start].append(predict_from(case, start, tmp, attempt))
            runs[start].append(measure_once(case, start, tmp, attempt))
    chosen = {n for start in STARTS for _, n, _ in recordings[start]}
    counts = sorted(set(STARTS) if unprofiled_only else set(case.counts) | chosen)
    runs.update(measure(case, [n for n in counts if n not in STARTS], tmp, repeats))
    measured = summarize(case, runs)
    print(f"\n### {case.name}: {case.description}\n\nmeasured without dlprof: median of {repeats} run(s)")
    floor = noise_floor(measured)
    print(f"\nnoise floor (one run without dlprof against the median of the others at its count): {error_stats(floor)}")
    result = {
        "description": case.description,
        "compared": "effective_steps_per_s" if case.whole_epochs else "steps_per_s",
        "measured": measured,
        "noise_floor": floor,
        "unprofiled_per_recording": {start: [u for _, _, u in recordings[start]] for start in STARTS},
        "errors": [],
        "recommendation_ok": [],
        "single_recording_errors": [],
    }
    if not unprofiled_only:
        result.update(prediction_table(case, recordings, measured, counts))
    result["unprofiled"] = unprofiled_check(case, recordings, measured)
    return result


def print_unprofiled_summary(results: dict) -> None:
    rows = [(name, row) for name, r in results.items() for row in r["unprofiled"]]
    if not rows:
        return
    print(
        "\n## Unprofiled speed at the recorded count against the truth without dlprof\n\n| case | recorded at | basis |"
        " truth | dlprof (median of recordings) | error | worst recording | noise floor (max) |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for name, row in rows:
        floor = results[name]["noise_floor"]
        print(
            f"| {name} | {row['recorded_at']} | {row['basis']} | {row['truth']:.2f} |"
            f" {statistics.median(row['dlprof']):.2f} | {row['error'] * 100:+.1f} % | {row['worst'] * 100:+.1f} % |"
            f" {pct(max(floor)) if floor else '-'} |"
        )
    worst = max(abs(row["error"]) for _, row in rows)
    worst_single = max(abs(row["worst"]) for _, row in rows)
    met = "met" if worst <= TARGET_UNPROFILED_ERROR else "MISSED"
    print(
        f"\n**unprofiled speed: worst error {pct(worst)} (median of recordings; target ≤"
        f" {pct(TARGET_UNPROFILED_ERROR)}: {met}), worst single recording {pct(worst_single)}.**"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one run per count and shorter runs (without --cases: two synthetic cases)"
    )
    parser.add_argument(
        "--cases", help=f"comma-separated case names: {', '.join([*SYNTHETIC, 'lora', 'trainer'])} [default: all]"
    )
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument(
        "--unprofiled-only",
        action="store_true",
        help="check only the report's unprofiled speed at the recorded counts against the truth (no model tables)",
    )
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
            results[name] = bench_case(cases[name], Path(tmp_name), repeats, args.unprofiled_only)
    errors = [e for r in results.values() for e in r["errors"]]
    recommendations = [ok for r in results.values() for ok in r["recommendation_ok"]]
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] if ordered else None
    print_unprofiled_summary(results)
    if args.unprofiled_only:
        if args.json:
            args.json.write_text(json.dumps({"cases": results, "repeats": repeats, "quick": args.quick}, indent=1))
        return
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
