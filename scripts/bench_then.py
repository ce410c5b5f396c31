"""``--then best`` checked: the speed after the switch against the trial's and against plain launches.

    python scripts/bench_then.py [--case lora|trainer|callback] [--try-workers 0,1,2] [--steps 3000] [--launches 3]
                                 [--repeats 1] [--trial-steps N]

1. ``dlprof record --try-workers ... --then best`` on the built-in workload (tiny Qwen2 + LoRA, ``--steps N``) or on
   scripts/bench_trainer.py (a Hugging Face Trainer, ``--max-steps N``), or (``callback``) that Trainer with
   ``DlprofCallback(try_workers=..., then="best")`` in its own process: the trials, then the training on at the
   setting chosen from them to its end; the report's ``trials.tuned`` gives the speed after the switch (steady steps
   inside an epoch) beside that setting's trial.
2. ``--launches`` plain launches of the same training without dlprof at the chosen setting, each as long as the
   steps trained after the switch: their steady speed inside an epoch (their ``--report``), the truth.

Prints both comparisons with the launches' spread, and writes every number to ``--json``. Run it on a quiet machine:
nothing else running (the speeds are compared within one run, but noise still widens them).

``--repeats R`` does it R times, each recording followed by its launches (so the VM's drift over the hour falls on
both alike), then compares the medians: the speeds after the switch, their trials, and every launch.

``--trial-steps N`` times each trial segment for N steps (dlprof's default: at least 40 steps and 2 s): longer
segments average more of the VM's minute-to-minute drift into each setting's trial.

``--allocator fixed`` runs every process (the recording and the launches) with glibc's malloc held to fixed
thresholds (scripts/bench_advice.py's): on CPU a process's page-fault level otherwise settles by chance and moves
inside it, and the speed with it (docs/validation.md); ``glibc``, the default, keeps glibc's own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_advice import FIXED_ALLOCATOR_ENV

TRAINER = Path(__file__).resolve().parent / "bench_trainer.py"


def _training(case: str, options: list[str], num_workers: int, steps: int, persistent: bool = False) -> list[str]:
    """The training's command line (its module's or script's arguments), ``steps`` long."""
    if case in ("trainer", "callback"):
        argv = [str(TRAINER), *options, "--num-workers", str(num_workers), "--max-steps", str(steps)]
        return argv + (["--persistent-workers"] if persistent else [])
    argv = ["-m", "dlprof.workloads.lora", *options, "--num-workers", str(num_workers), "--steps", str(steps)]
    return argv + (["--persistent-workers"] if persistent else [])


def _record(
    case: str, options: list[str], own: int, try_workers: str, steps: int, out: Path, trial_steps: int | None = None
) -> tuple[dict, str]:
    record = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "then"]
    record += ["--try-workers", try_workers, "--then", "best"]
    record += ["--trial-steps", str(trial_steps)] if trial_steps else []
    if case == "callback":
        record = [sys.executable, *_training(case, options, own, steps)]
        record += ["--dlprof-try-workers", try_workers, "--dlprof-out", str(out)]
        record += ["--dlprof-trial-steps", str(trial_steps)] if trial_steps else []
    elif case == "trainer":
        record += ["--", "python", *_training(case, options, own, steps)]
    else:
        record += [*options, "--num-workers", str(own), "--steps", str(steps)]
    done = subprocess.run(record, check=True, capture_output=True, text=True, timeout=3600)
    analyzed = subprocess.run(
        [sys.executable, "-m", "dlprof", "analyze", str(out / "then"), "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    document = json.loads(analyzed.stdout)
    # A progress bar (the Trainer's tqdm) may share the line: from dlprof's words on.
    mark = "dlprof: the trials are done"
    said = [line[line.index(mark) :] for line in done.stderr.splitlines() if mark in line]
    return (document["runs"][0] if "runs" in document else document), (said[0] if said else "")


def _launch(case: str, options: list[str], tuned: dict, report: Path) -> float:
    argv = _training(case, options, tuned["num_workers"], tuned["steps_at_setting"], bool(tuned["persistent_workers"]))
    subprocess.run([sys.executable, *argv, "--report", str(report)], check=True, capture_output=True, timeout=3600)
    return json.loads(report.read_text())["steps_per_s_steady"]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("lora", "trainer", "callback"), default="lora")
    parser.add_argument("--try-workers", default="0,1,2")
    parser.add_argument("--steps", type=int, default=3000, help="the recorded training's length [default: 3000]")
    parser.add_argument("--launches", type=int, default=3, help="plain launches at the chosen setting [default: 3]")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=2, help="the workload's own setting [default: 2]")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument("--allocator", choices=("glibc", "fixed"), default="glibc")
    parser.add_argument("--repeats", type=int, default=1, help="recordings, each with its launches [default: 1]")
    parser.add_argument("--trial-steps", type=int, help="steps per trial segment [default: dlprof's]")
    args = parser.parse_args()
    if args.allocator == "fixed":
        os.environ.update(FIXED_ALLOCATOR_ENV)  # inherited by every process started from here
    options = ["--batch-size", str(args.batch_size)]
    options += ["--max-length", str(args.max_length)] if args.case == "lora" else []
    what = {"lora": "built-in workload", "trainer": "Trainer (scripts/bench_trainer.py)"}.get(
        args.case, "Trainer with DlprofCallback(try_workers=..., then='best')"
    )
    runs = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(_one_run(args, options, Path(tmp)))
        print(
            f"repeat {repeat + 1}: {what}, {' '.join(options)}, its own num_workers={args.num_workers},"
            f" allocator {args.allocator}; {runs[-1]['said']}",
            flush=True,
        )
    print(
        "| after the switch | steps | steps/s (spread) | its trial | vs trial | launches: median (each) | vs them"
        " | widths moved: after, trial | main CPU ms a step: after, trial |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        tuned, launches = run["tuned"], run["launches"]
        print(
            f"| num_workers={tuned['num_workers']} from step {tuned['first_step']} | {tuned['steps_at_setting']} |"
            f" {tuned['steps_per_s']:.2f} ({tuned['spread_pct']} %) | {tuned['trial_steps_per_s']} |"
            f" {_pct(tuned['change_pct'])} (held: {tuned['held']}) | {_launches(launches)} |"
            f" {_pct(run['against_launches_pct'])} | {_widths_moved(run)} | {_cpu_levels(tuned)} |"
        )
    chosen = {run["tuned"]["num_workers"] for run in runs}
    summary = None
    if len(runs) > 1 and len(chosen) == 1:
        after = statistics.median(run["tuned"]["steps_per_s"] for run in runs)
        trial = statistics.median(run["tuned"]["trial_steps_per_s"] for run in runs)
        launches = [speed for run in runs for speed in run["launches"]]
        truth = statistics.median(launches)
        summary = {"after": after, "trial": trial, "launches": truth}
        summary |= {"vs_trial_pct": 100 * (after / trial - 1), "vs_launches_pct": 100 * (after / truth - 1)}
        print(
            f"| medians of {len(runs)} repeats (num_workers={chosen.pop()}) | | {after:.2f} | {trial:.2f} |"
            f" {_pct(summary['vs_trial_pct'])} | {_launches(launches)} | {_pct(summary['vs_launches_pct'])} |"
        )
    elif len(runs) > 1:
        print(f"the repeats chose different settings ({sorted(chosen)}): no medians across them")
    if args.json is not None:
        numbers = {"runs": runs, "allocator": args.allocator, "medians": summary}
        args.json.write_text(json.dumps(numbers, indent=1))


def _cpu_levels(tuned: dict) -> str:
    """The main process's CPU time per steady step after the switch and in its trial, and whether the report named
    the training's own speed as moved between them (the same work taking it more or less CPU time)."""
    cpu = tuned.get("cpu")
    if not cpu:
        return "-"
    moved = " (its own speed moved)" if cpu["cpu_per_step_moved"] else ""
    return f"{cpu['cpu_ms_per_step']:.1f}, {cpu['trial_cpu_ms_per_step']:.1f}{moved}"


def _widths_moved(run: dict) -> str:
    """How much scaling to the run's mean batch moved the speed after the switch and its trial's (- : not scaled)."""
    tuned = run["tuned"]
    persistent = tuned["trial_persistent_workers"]
    persistent = tuned["persistent_workers"] if persistent is None else persistent
    trial = next(
        (
            r
            for r in run["trials"]["runs"]
            if r["num_workers"] == tuned["num_workers"] and r["persistent_workers"] == persistent
        ),
        None,
    )
    return f"{_pct(tuned['width_scaled_pct'])}, {_pct(trial['width_scaled_pct'] if trial else None)}"


def _launches(launches: list[float]) -> str:
    """The launches' median, each, and their spread (% of the median)."""
    truth = statistics.median(launches)
    each = ", ".join(f"{s:.2f}" for s in launches)
    return f"{truth:.2f} ({each}; spread {100 * (max(launches) - min(launches)) / truth:.1f} %)"


def _one_run(args: argparse.Namespace, options: list[str], work: Path) -> dict:
    """One recording with ``--then best``, then its plain launches at the setting it chose."""
    run, said = _record(args.case, options, args.num_workers, args.try_workers, args.steps, work, args.trial_steps)
    tuned = run["trials"]["tuned"]
    if tuned is None or tuned["num_workers"] is None or tuned["steps_per_s"] is None:
        sys.exit(f"bench_then: no speed after the switch: {tuned}")
    launches = [_launch(args.case, options, tuned, work / f"launch-{i}.json") for i in range(args.launches)]
    against = 100 * (tuned["steps_per_s"] / statistics.median(launches) - 1)
    # The trials' settings and their scaling to the run's mean batch: how much the widths moved each speed.
    trials = {"runs": run["trials"]["runs"], "width_scaling": run["trials"]["width_scaling"]}
    return {"tuned": tuned, "launches": launches, "against_launches_pct": against, "said": said, "trials": trials}


if __name__ == "__main__":
    main()
