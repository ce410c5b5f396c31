"""What a dlprof recording does to the speed of the training it records, against plain launches, interleaved.

    python scripts/measure_after_effect.py [--rounds 6] [--variant=--no-loader-spans ...] [--allocator fixed|glibc]

Each round is one plain launch of the built-in workload (``python -m dlprof.workloads.lora``, no dlprof; batch 4, as
``bench_advice.py``'s lora case; ``num_workers=0``, so that no worker restart falls on the steps compared) and one
``dlprof record`` of it per ``--variant`` (its options; default: one recording with none), their order rotated from
round to round. A recording waits ``--wait`` steps (two epochs) before its profiler window, so the same process is
timed three ways, each over its steady steps (every epoch's first steps and the fork probe's settling steps left out):

* **before**: the steps of the second epoch, ahead of the window, with dlprof's probe on (spans, the sampler);
* **after**: the reference steps after the window, what ``dlprof analyze`` reports as the unprofiled speed;
* the plain launch over the very same step indices.

Printed per round and as medians, each recording against the plain launch of its round: the probe's cost (the
recording's steps before the window against the plain launch's same steps), the window's after-effect (the
recording's after/before ratio against the plain launch's ratio over the same steps: a process's own drift cancels),
and the reference steps against the plain launch's, the gap the report's unprofiled speed carries. ``--allocator
fixed`` as in scripts/bench_advice.py.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.core.manifest import EPOCH_SETTLE_STEPS, PHASE_AFTER, PHASE_BEFORE  # noqa: E402
from dlprof.trace.discover import load_run  # noqa: E402
from dlprof.workloads.lora import DEFAULT_DATASET  # noqa: E402
from dlprof.workloads.records import load_examples  # noqa: E402

BATCH_SIZE = 4
#: The profiler window: dlprof record's default warm-up and active steps.
WINDOW_STEPS = 3 + 20
#: Reference steps after the window: about two epochs.
REFERENCE_STEPS = 110
#: The fork probe forks after this many reference steps (runs without workers); its settling steps are left out.
FORK_PROBE_AFTER = 2


def _steady(step_ms: list[float], per_epoch: int, indices: range) -> list[float]:
    """The steps at ``indices``, each epoch's first EPOCH_SETTLE_STEPS left out (both processes run the same
    loader, so a step's index tells its epoch)."""
    return [step_ms[i] for i in indices if i < len(step_ms) and i % per_epoch >= EPOCH_SETTLE_STEPS]


def rate(step_ms: list[float]) -> float:
    """Steps per second over the steps' own time."""
    return 1000 * len(step_ms) / sum(step_ms)


def run_checked(command: list[str], env: dict[str, str]) -> None:
    """Run ``command`` from the repository, quietly; exit with its stderr's end if it fails."""
    done = subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")


def _record(wait: int, out: Path, env: dict[str, str], options: list[str]) -> tuple[list[float], list[str]]:
    command = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "run"]
    command += ["--num-workers", "0", "--batch-size", str(BATCH_SIZE), "--wait", str(wait)]
    command += ["--reference-steps", str(REFERENCE_STEPS), *options]
    run_checked(command, env)
    return step_clock_of(out / "run")


def step_clock_of(run_dir: Path) -> tuple[list[float], list[str]]:
    """The recording in ``run_dir``: every step's wall ms and phase."""
    trace = next(run_dir.glob("*.pt.trace.json.gz"))
    manifest = load_run(trace, progress=False).manifest
    if manifest is None:
        raise SystemExit(f"{trace}: no dlprof manifest")
    return list(manifest.step_clock.wall_ms), list(manifest.step_clock.phase)


def _launch(steps: int, report: Path, env: dict[str, str]) -> list[float]:
    command = [sys.executable, "-m", "dlprof.workloads.lora", "--batch-size", str(BATCH_SIZE)]
    command += ["--num-workers", "0", "--steps", str(steps), "--report", str(report)]
    run_checked(command, env)
    return [float(ms) for ms in json.loads(report.read_text())["step_ms"]]


#: What each recording is compared by, and its printed name.
LABELS = (("probe", "probe's cost"), ("effect", "after-effect"), ("reference", "reference vs plain"))


def pct(ratio: float) -> str:
    """A ratio as a signed per cent change."""
    return f"{100 * (ratio - 1):+.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of one plain launch and one of each recording")
    parser.add_argument("--allocator", choices=("fixed", "glibc"), default="fixed")
    parser.add_argument(
        "--variant",
        action="append",
        metavar="OPTIONS",
        help="dlprof record options of one kind of recording, quoted (repeatable; default: one, with none)",
    )
    args = parser.parse_args(argv)
    variants = [v.split() for v in args.variant] if args.variant else [[]]
    names = [" ".join(v) or "record" for v in variants]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if args.allocator == "fixed":
        env.update(FIXED_ALLOCATOR_ENV)
    per_epoch = -(-len(load_examples(DEFAULT_DATASET)) // BATCH_SIZE)
    wait = 2 * per_epoch
    before = range(per_epoch, wait)  # the second epoch, ahead of the window
    after = range(wait + WINDOW_STEPS + FORK_PROBE_AFTER + EPOCH_SETTLE_STEPS, wait + WINDOW_STEPS + REFERENCE_STEPS)
    steps = wait + WINDOW_STEPS + REFERENCE_STEPS
    print(f"built-in workload, batch {BATCH_SIZE}, num_workers=0, allocator {args.allocator}")
    print(f"before: steps {before.start}-{before.stop - 1}; after: steps {after.start}-{after.stop - 1}; steps/s")
    print("probe's cost: recorded before / plain before; after-effect: (recorded after / before) / (plain after /")
    print("before); reference vs plain: recorded after / plain after; each against the plain launch of its round\n")
    print("| round | kind | before | after | probe's cost | after-effect | reference vs plain |")
    print("|---|---|---|---|---|---|---|")
    kinds = ["plain", *names]
    found: dict[str, dict[str, list[float]]] = {n: {key: [] for key, _ in LABELS} for n in names}
    with tempfile.TemporaryDirectory(prefix="after-effect-") as scratch:
        for round_index in range(args.rounds):
            shift = round_index % len(kinds)
            rates: dict[str, tuple[float, float]] = {}
            for kind in kinds[shift:] + kinds[:shift]:
                if kind == "plain":
                    wall = _launch(steps, Path(scratch) / f"plain{round_index}.json", env)
                else:
                    variant = names.index(kind)
                    out = Path(scratch) / f"rec{round_index}-{variant}"
                    wall, phase = _record(wait, out, env, variants[variant])
                    if any(phase[i] != PHASE_BEFORE for i in before) or any(
                        phase[i] != PHASE_AFTER for i in after if i < len(phase)
                    ):
                        raise SystemExit("the recording's phases do not fall where this script expects them")
                rates[kind] = (rate(_steady(wall, per_epoch, before)), rate(_steady(wall, per_epoch, after)))
            pb, pa = rates["plain"]
            print(f"| {round_index + 1} | plain | {pb:.2f} | {pa:.2f} | | | |")
            for name in names:
                rb, ra = rates[name]
                got = found[name]
                got["probe"].append(rb / pb)
                got["effect"].append((ra / rb) / (pa / pb))
                got["reference"].append(ra / pa)
                print(
                    f"| {round_index + 1} | {name} | {rb:.2f} | {ra:.2f} | {pct(got['probe'][-1])} |"
                    f" {pct(got['effect'][-1])} | {pct(got['reference'][-1])} |",
                    flush=True,
                )
    print()
    for name, got in found.items():
        cells = [
            f"{label} {pct(statistics.median(got[key]))} ({pct(min(got[key]))} to {pct(max(got[key]))})"
            for key, label in LABELS
        ]
        print(f"{name}: medians " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
