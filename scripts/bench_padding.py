"""The padding finding's measured gain against plain launches, on the built-in workload (tiny Qwen2 + LoRA).

    python scripts/bench_padding.py [--rounds 3] [--max-length 512] [--batch-size 4] [--num-workers 2]

1. ``dlprof record --pad-to-max-length --try-workers N`` (the built-in workload padding every batch to
   ``--max-length``): its trials end with a segment whose batches are trimmed to their longest sequence, and the
   padding finding's gain is measured there.
2. Plain launches of the same workload without dlprof, padded to ``--max-length`` and padded to each batch's longest
   (the fix), alternating, ``--rounds`` of each: their steady speed (``--report``).

Prints dlprof's padded and trimmed speeds and gain beside the launches' medians (the truth), and writes every number
to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _launch(options: list[str], padded: bool, steps: int, report: Path) -> float:
    argv = [sys.executable, "-m", "dlprof.workloads.lora", *options, "--steps", str(steps), "--report", str(report)]
    if padded:
        argv.append("--pad-to-max-length")
    subprocess.run(argv, check=True, capture_output=True, timeout=900)
    return json.loads(report.read_text())["steps_per_s_steady"]


def _record(options: list[str], num_workers: int, out: Path) -> dict:
    record = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "padded", *options]
    record += ["--pad-to-max-length", "--try-workers", str(num_workers)]
    subprocess.run(record, check=True, capture_output=True, timeout=1800)
    analyzed = subprocess.run(
        [sys.executable, "-m", "dlprof", "analyze", str(out / "padded"), "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    document = json.loads(analyzed.stdout)
    return document["runs"][0] if "runs" in document else document


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="plain launches of each padding [default: 3]")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=160, help="steps of each plain launch [default: 160]")
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args()
    options = ["--max-length", str(args.max_length), "--batch-size", str(args.batch_size)]
    options += ["--num-workers", str(args.num_workers)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        launches: dict[str, list[float]] = {"padded": [], "longest": []}
        run = _record(options, args.num_workers, work / "traces")
        for r in range(args.rounds):
            for name in ("padded", "longest") if r % 2 == 0 else ("longest", "padded"):
                launches[name].append(_launch(options, name == "padded", args.steps, work / f"{name}-{r}.json"))
    measured = run["trials"]["padding"]
    finding = next((f for f in run["findings"] if f["id"] == "padding"), None)
    truth = {name: statistics.median(speeds) for name, speeds in launches.items()}
    truth_gain = 100 * (truth["longest"] / truth["padded"] - 1)
    print(f"built-in workload, {' '.join(options)}; plain launches: {args.rounds} of each, alternating")
    print("| | padded to max_length, steps/s | to the longest, steps/s | gain |")
    print("|---|---|---|---|")
    if measured is not None:
        trimmed, padded, gain = measured["trimmed_steps_per_s"], measured["padded_steps_per_s"], measured["gain_pct"]
        print(f"| dlprof's trials (trusted: {measured['trusted']}) | {padded} | {trimmed} | {_pct(gain)} |")
    else:
        print(f"| dlprof's trials | - | - | not measured: {run['trials']['padding_not_measured']} |")
    each = {name: ", ".join(f"{s:.2f}" for s in speeds) for name, speeds in launches.items()}
    print(
        f"| plain launches (median) | {truth['padded']:.2f} ({each['padded']}) | {truth['longest']:.2f}"
        f" ({each['longest']}) | {_pct(truth_gain)} |"
    )
    if finding is not None:
        print(f"\nthe finding: {finding['gain_basis']} {_pct(finding['gain_pct'])}: {finding['evidence']}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"trials_padding": measured, "finding": finding, "launches": launches, "truth_gain_pct": truth_gain}
            )
        )


if __name__ == "__main__":
    main()
