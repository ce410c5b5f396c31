"""How good are dlprof's advice and the speeds it measures? Checked against truth measured without dlprof, two ways.

    python scripts/bench_advice.py --json bench.json         # every case, every check (~90 minutes on 2 cores)
    python scripts/bench_advice.py --cases lora,trainer      # the real-model cases only (~28 minutes)
    python scripts/bench_advice.py --quick --cases io-bound  # one recording per start, one launch per count (~3.5 min)
    python scripts/bench_advice.py --unprofiled-only --cases io-bound,io-heavy  # the unprofiled speed alone

Cases:

* synthetic (``cpu-loading``, ``io-loading``, ``not-input-bound``, ``mixed``, ``busy-host``, and the
  I/O-bound loaders of issue 13: ``io-bound``, 15 ms of blocking read per sample and a 20 ms
  accelerator step, and ``io-heavy``, 30 ms per sample): scripts/bench_workload.py with known
  per-sample CPU cost, per-sample blocking I/O, collate cost, host work and a sleep standing in for
  the GPU. No epoch boundary is reached: speeds are compared steady (``steps_per_s``: steps over time
  inside an epoch, each start-up left out), at every num_workers 0-6.
* ``lora``: the built-in workload (``python -m dlprof.workloads.lora``: tiny Qwen2 + LoRA, batch 4,
  tokenizing in ``__getitem__``), recorded with ``dlprof record --num-workers N`` and its defaults.
* ``trainer``: a plain Hugging Face ``Trainer`` fine-tune (scripts/bench_trainer.py), recorded with
  ``dlprof record -- python scripts/bench_trainer.py --num-workers N --epochs 20`` (dlprof stops it).

The real-model cases run whole epochs (workers restart at each boundary, as PyTorch and the Trainer do by
default), so they are compared over whole epochs (a prediction's ``effective_steps_per_s``, the trials'
``epoch_steps_per_s``, the truth's steps over whole epochs), at num_workers 0, 1, 2 and 4 (``--quick``: 0 and 2).

What is measured, per case:

1. **Recordings.** ``dlprof record`` at num_workers 0 and at 2 (the starts, alternating), ``--recordings`` times
   each (default: synthetic 2, real 3: a real one carries its process's speed and the machine's load of its
   minutes); the first ``--trial-recordings`` from each start (synthetic: both; real: the first) also run the
   in-process trials (``--try-workers`` at the case's counts, with dlprof's defaults: segments of 40 steps and 2 s,
   2 rounds; ``--no-trials`` leaves them out), and a start's trial speed is their median. Each is analysed as
   ``dlprof analyze`` does: the model's prediction at every count (a count's prediction is the median over the
   recordings from one start; trials run after the window and the reference steps the model reads, so a recording
   with trials predicts as one without), the recommendation (with trials: what it rests on, and the model's own
   pick), the unprofiled speed at the recorded count, and the trials' measured speeds with their spread.
2. **Truth from separate launches** (no dlprof): the training launched at least ``--launches`` times per count
   (default 3), the median. Synthetic: a round of launches at every count before the first trial recording and
   after each one (the order reversed from round to round: 5 per count with the defaults), and each trial recording
   is also compared with the two rounds right around it (``launches around``), the truth of the trials' own minutes:
   where the workers outpace training, the machine's speed drifts within a minute, in one process as across
   launches, while the counts bound by their workers hold (docs/ARCHITECTURE.md#facts-the-code-relies-on). Real:
   each recording is followed by a launch at its count, the other counts (and any recommended count) run in
   interleaved rounds afterwards. A synthetic launch: at least 80 steps, the first 20
   left out, the others timed over at least 3 s, as an in-process segment (steps alone would last too short a time
   at a fast count, and single launches stray from each other: docs/validation.md). Real: 3 epochs, the first left
   out (``--quick``: 2).
3. **Truth in one process** (scripts/measure_inprocess.py, no dlprof; ``--no-inprocess`` leaves it out): every
   count and any recommended one trained in turn inside one process, in rounds whose order alternates (0 1 2 ...,
   then reversed) so that drift cancels. It has no launch-to-launch speed modes. Synthetic: one process of 2
   rounds (forward, then reversed: a linear drift cancels), segments of at least 60 steps and 3 s after the
   refill, in whole rounds of the workers' delivery (longer than the trials' 40 steps and 2 s: the truth must be
   the finer measurement); the median over the rounds. Real: ``--processes`` processes (default 3; ``--quick``
   1), each of 2 rounds of 2 whole epochs per count (``--quick``: 1), worker restarts included, each process run
   right after a recording; the truth is the median of all their segments (6 per count). Each process runs right
   after a recording because the machine's speed drifts from epoch to epoch and over minutes
   (docs/ARCHITECTURE.md#facts-the-code-relies-on).

Compared (signed errors in the tables, their sizes in the statistics):

* the model's predictions against each truth;
* the trials' measured speeds against each truth (and the synthetic ones against the launches around them), with
  each trial's spread;
* every recommendation (the model's, and the one resting on the trials) against the best measured count;
* the report's unprofiled speed at the recorded count (steady reference steps over their time; for the real cases
  also over whole epochs) against the separate-launch truth at that count (and the in-process one on its basis);
  where each recording is followed by its own launch (not bracketed), also paired: each recording against that
  launch, whose median a drift over the run's minutes leaves alone.

Targets (issue 13), printed with their numbers as "met" or "MISSED" in a Markdown table at the end:

* trials within 5 % of the separate-launch truth, every synthetic case, count and start (the median of the launches
  made around the trial recordings; each recording against the two rounds right around it is printed beside it);
* real cases: every prediction within 10 % of the in-process truth, at every count, from both starts;
* synthetic prediction error (against the separate-launch truth) median ≤ 3 %, p90 ≤ 8 %;
* every recommendation within 5 % of the best measured count (synthetic: separate-launch truth; real: in-process);
* the unprofiled speed at the recorded count within 5 % of the truth, every case (median of the recordings; against
  the launches for the synthetic cases, the in-process truth over whole epochs for the real ones);
* real cases (issue 25): the model's prediction at the recorded count within 5 % of the plain launches made in the
  same run at that count, from both starts (median of the recordings against the median of the launches; the
  pairs, each recording against the launch right after it, printed beside).

The separate-launch truth is the synthetic cases' yardstick (their launches barely vary); the in-process truth is
the real cases' (theirs vary by more than the targets). Both are printed for every case.

Why medians of recordings: a prediction anchored on one run carries that run's luck (its process's speed mode).
Each case also prints two error figures that need no model: the noise floor (one launch against the median of the
other launches at its count) and the error of single recordings.

``--json`` keeps every number: per case the recordings (predictions, recommendations, unprofiled speeds, trials),
both truths with every launch and segment, the comparisons, and the targets, the plan and the timings; it is written
after every case (``complete`` turns true when the run ends), so that a long run that fails later keeps its cases.

Duration: each run prints its own table of timings, and ``--json`` keeps it; docs/validation.md gives the last
full runs'.

The allocator: every process the bench starts (launches, in-process truths, recordings and their training) runs
with glibc's malloc held to fixed thresholds (``--allocator fixed``, the default: ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_TOP_PAD_``, below). With glibc's defaults, a CPU training process takes
thousands of minor page faults per step: malloc maps and unmaps the step's mid-sized tensors, and it raises its own
threshold whenever a large mapped block is freed, so each process settles at a level of its own, by chance, and
keeps it. That gives the real cases launch-to-launch speed modes and shifts a process's speed after a profiler
window, whose freed buffers raise the threshold: noise no DataLoader model can predict. Fixed thresholds take the
faults to about none in every process alike, and a window then leaves the speed as it was
(docs/ARCHITECTURE.md#facts-the-code-relies-on).
``--allocator glibc`` keeps glibc's defaults; dlprof's report then names the page faults where they take 5 % of the
step or more (the step clock keeps each step's page faults and kernel time).

Options that trade accuracy for time: ``--recordings 1`` (one recording per start: synthetic, 3 rounds of launches
instead of 5 and one trial recording per start, -25 min; real-model predictions from the trial recording alone),
``--trial-recordings N``, ``--rounds N`` (in-process
rounds), ``--processes N`` (in-process processes), ``--no-trials`` (-9 min, and no trials checked),
``--no-inprocess`` (-14 min, and the real cases lose their yardstick), ``--quick``, ``--cases``.
``--unprofiled-only`` records and measures at the recorded counts only and skips the model's and the trials'
tables: the measurement's check alone, in a fraction of the time.
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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.advice.rules import CHOOSE_WITHIN, close_enough  # noqa: E402
from dlprof.workflows.analyze import build_report  # noqa: E402

WORKLOAD = REPO / "scripts" / "bench_workload.py"
TRAINER = REPO / "scripts" / "bench_trainer.py"
INPROCESS = REPO / "scripts" / "measure_inprocess.py"
#: The recommendation must reach this share of the best measured throughput.
WITHIN_BEST = 0.95
#: Targets (issue 13).
TARGET_TRIALS_ERROR = 0.05  # synthetic trials against the separate-launch truth
TARGET_REAL_ERROR = 0.10  # real-case predictions against the in-process truth
TARGET_SYNTHETIC_MEDIAN = 0.03  # synthetic prediction error against the separate-launch truth
TARGET_SYNTHETIC_P90 = 0.08
TARGET_UNPROFILED_ERROR = 0.05  # the report's unprofiled speed at the recorded count against the truth
#: Recording starts from these counts.
STARTS = (0, 2)
SYNTHETIC_COUNTS = tuple(range(7))
REAL_COUNTS = (0, 1, 2, 4)
#: `--quick`: the real-model cases take minutes per count (and any recommended count is measured too).
REAL_COUNTS_QUICK = (0, 2)
#: Recordings per start: synthetic, real-model cases, and with `--quick`. A real-model recording carries its
#: process's speed and the machine's load of its minutes, so the prediction is the median of three.
SYNTHETIC_RECORDINGS, REAL_RECORDINGS, RECORDINGS_QUICK = 2, 3, 1
#: Of those, the first ones run the trials: every synthetic recording, the first real-model one (its trials have no
#: target: they stray with the real cases' epochs), and with `--quick` the one. Where the workers outpace training
#: (io-loading at 4-6 workers, bound by the main process on 2 cores), this VM's speed drifts by up to 15 % within a
#: minute, alike inside one process and across launches (one process alternating 4 and 5 workers in 8 rounds of 3 s:
#: 94.6-106.0 steps/s, the two counts within 1-7 % of each other in every round); a trial recording samples one
#: minute of it, so the trials are the median of two, each compared with the launches made right around it.
SYNTHETIC_TRIAL_RECORDINGS, REAL_TRIAL_RECORDINGS = 2, 1
#: Launches without dlprof per count, their median the separate-launch truth, by default and with `--quick`.
LAUNCHES, LAUNCHES_QUICK = 3, 1
#: In-process truth: processes, rounds per process, and whole epochs per segment (real cases), by default and with
#: `--quick`. A real case's processes run between its recordings (the machine's load drifts by 10-20 % over minutes:
#: one block of truth after them all would measure another machine), and the truth is the median of all their
#: segments.
SYNTHETIC_PROCESSES, REAL_PROCESSES, REAL_PROCESSES_QUICK = 1, 3, 1
SYNTHETIC_ROUNDS = 2
REAL_ROUNDS, REAL_ROUNDS_QUICK = 2, 2
REAL_SEGMENT_EPOCHS, REAL_SEGMENT_EPOCHS_QUICK = 2, 1
#: Synthetic in-process segments: steps and seconds timed after the refill.
SYNTHETIC_SEGMENT_STEPS, SYNTHETIC_SEGMENT_SECONDS = 60, 3.0
#: The built-in workload's batch (as `dlprof record` runs it by default).
LORA_BATCH_SIZE = 4
#: No run may hang the benchmark.
RUN_TIMEOUT_S = 1800
#: ``--allocator fixed``: glibc's malloc with fixed thresholds (no dynamic mmap threshold), in every process started.
FIXED_ALLOCATOR_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_TOP_PAD_": str(256 << 20),
}

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
#: Synthetic truth from launches: steps run without dlprof, the first excluded (start-up), and the least time the
#: others are timed over: as long as an in-process segment. 60 steps alone were 0.6 s at io-loading's 95 steps/s
#: (5-6 workers), a window in which this VM's moment-to-moment speed moved single launches by up to 5.9 %.
SYNTHETIC_STEPS, SYNTHETIC_WARMUP, SYNTHETIC_LAUNCH_SECONDS = 80, 20, SYNTHETIC_SEGMENT_SECONDS
#: Recorded: steps the script would run; dlprof stops it after the window and the reference steps (and the trials).
SYNTHETIC_RECORDED_STEPS = 100_000
#: The Trainer script's epochs when recorded: enough for the window, the reference steps and whole epochs, and the
#: trials (dlprof stops it).
TRAINER_RECORDED_EPOCHS = 20
#: The real-model cases' unprofiled speeds against their truth: inside an epoch and over whole epochs.
BASIS_IN_EPOCH, BASIS_WHOLE_EPOCHS = "inside an epoch", "over whole epochs"
REAL_UNPROFILED_CHECKS = (
    (BASIS_IN_EPOCH, "steps_per_s_steady", "steps_per_s"),
    (BASIS_WHOLE_EPOCHS, "steps_per_s_epochs", "epoch_steps_per_s"),
)
#: `--quick` without `--cases`: the first two synthetic cases.
QUICK_DEFAULT = ("cpu-loading", "io-loading")
#: The two truths.
LAUNCHES_TRUTH, INPROCESS_TRUTH = "launches", "in-process"

#: Wall time of every piece, per case: {case: {piece: [seconds, ...]}}.
TIMINGS: dict[str, dict[str, list[float]]] = {}


@dataclass(frozen=True)
class Case:
    """How to record, measure and compare one workload."""

    name: str
    description: str
    counts: tuple[int, ...]
    #: `dlprof record` arguments after `--out DIR --name NAME` (and any trial options), for a starting count.
    record_args: Callable[[int], list[str]]
    #: The measuring command (no dlprof) for a count, writing its JSON report to the given path.
    measure_command: Callable[[int, Path], list[str]]
    #: The measured steps/s in that report.
    measured_key: str
    #: Compare over whole epochs (predictions' `effective_steps_per_s`, trials' `epoch_steps_per_s`) rather than
    #: steady state; the real-model cases, whose targets use the in-process truth.
    whole_epochs: bool
    #: scripts/measure_inprocess.py's command for these counts and rounds, writing its report to the given path.
    inprocess_command: Callable[[list[int], int, Path], list[str]]
    inprocess_rounds: int
    #: Processes the in-process truth runs in, between the recordings (`--processes` overrides it).
    inprocess_processes: int
    #: Recordings per start (`--recordings` overrides it), the first ``trial_recordings`` of them with trials
    #: (`--trial-recordings`).
    recordings: int
    trial_recordings: int
    #: The launch truth made in rounds of every count right before and after each trial recording (the trials
    #: compared with the two rounds around them), rather than one launch after each recording and the rest after all:
    #: the synthetic cases, whose trials have a target against the launches.
    bracketed: bool = False
    #: Extra report keys shown in the table (label, key).
    extra_columns: tuple[tuple[str, str], ...] = field(default=())
    #: The report's unprofiled speeds checked against the truth: (basis, truth key in the measuring report,
    #: UnprofiledStats attribute).
    unprofiled_checks: tuple[tuple[str, str, str], ...] = ((BASIS_IN_EPOCH, "steps_per_s", "steps_per_s"),)

    @property
    def target_truth(self) -> str:
        """The truth the targets use: in-process for the real cases, separate launches for the synthetic ones."""
        return INPROCESS_TRUTH if self.whole_epochs else LAUNCHES_TRUTH

    @property
    def basis(self) -> str:
        return BASIS_WHOLE_EPOCHS if self.whole_epochs else BASIS_IN_EPOCH


@dataclass(frozen=True)
class Plan:
    """What one invocation runs, per case."""

    #: Recordings per start (None: each case's own).
    recordings: int | None
    launches: int
    trials: bool
    inprocess: bool
    unprofiled_only: bool
    #: In-process rounds (None: each case's own).
    rounds: int | None = None
    #: In-process processes (None: each case's own).
    processes: int | None = None
    #: Of the recordings per start, how many run the trials (None: each case's own).
    trial_recordings: int | None = None
    #: Record with ``--plain-launch``: each recording's predictions are scaled to a plain launch of its command.
    plain_launch: bool = False


@dataclass(frozen=True)
class Recording:
    """One `dlprof record` and what its report says."""

    start: int
    attempt: int
    #: Predicted steps/s per count, on the case's basis.
    predicted: dict[int, float]
    #: The recommended num_workers, what it rests on ("measured" or "predicted"), and the model's own pick.
    recommended: int | None
    rests_on: str
    model_recommended: int | None
    #: The report's unprofiled speed: each checked attribute, its spread, whether trusted, steady and left-out steps.
    unprofiled: dict
    #: The trials (None: none asked for, or none ran): basis, rounds, notes, and per count (non-persistent) the
    #: measured speeds, spread, steps timed, restart, prediction and error.
    trials: dict | None
    seconds: float
    #: The rounds of launches (indices into the case's bracket rounds) made right before and after this recording;
    #: None when it was not bracketed.
    bracket: tuple[int, int] | None = None


def timed(case: str, piece: str, seconds: float) -> None:
    TIMINGS.setdefault(case, {}).setdefault(piece, []).append(seconds)


def synthetic_case(name: str, options: dict) -> Case:
    def workload_args(workers: int, steps: int) -> list[str]:
        args = [str(WORKLOAD), "--num-workers", str(workers), "--steps", str(steps)]
        for key, value in options.items():
            args += [f"--{key}", str(value)]
        return args

    def inprocess(counts: list[int], rounds: int, report: Path) -> list[str]:
        command = [sys.executable, str(INPROCESS), "synthetic", "--counts", ",".join(map(str, counts))]
        command += ["--rounds", str(rounds), "--timed-steps", str(SYNTHETIC_SEGMENT_STEPS)]
        command += ["--min-seconds", str(SYNTHETIC_SEGMENT_SECONDS), "--report", str(report)]
        for key, value in options.items():
            command += [f"--{key}", str(value)]
        return command

    return Case(
        name=name,
        description=", ".join(f"{k}={v}" for k, v in options.items())
        + f"; launches: at least {SYNTHETIC_STEPS} steps, the first {SYNTHETIC_WARMUP} excluded, the others timed"
        + f" over at least {SYNTHETIC_LAUNCH_SECONDS:g} s",
        counts=SYNTHETIC_COUNTS,
        # dlprof record's defaults but a shorter start: the recorder stops the script after the window and the
        # reference steps (and the trials).
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
            *workload_args(w, SYNTHETIC_STEPS),
            "--warmup-steps",
            str(SYNTHETIC_WARMUP),
            "--min-seconds",
            str(SYNTHETIC_LAUNCH_SECONDS),
            "--report",
            str(report),
        ],
        measured_key="steps_per_s",
        whole_epochs=False,
        inprocess_command=inprocess,
        inprocess_rounds=SYNTHETIC_ROUNDS,
        inprocess_processes=SYNTHETIC_PROCESSES,
        recordings=SYNTHETIC_RECORDINGS,
        trial_recordings=SYNTHETIC_TRIAL_RECORDINGS,
        bracketed=True,
    )


def real_inprocess(workload: str, quick: bool) -> Callable[[list[int], int, Path], list[str]]:
    epochs = REAL_SEGMENT_EPOCHS_QUICK if quick else REAL_SEGMENT_EPOCHS
    return lambda counts, rounds, report: [
        sys.executable,
        str(INPROCESS),
        workload,
        "--counts",
        ",".join(map(str, counts)),
        "--rounds",
        str(rounds),
        "--epochs",
        str(epochs),
        "--batch-size",
        str(LORA_BATCH_SIZE),
        "--report",
        str(report),
    ]


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
            f"built-in workload (tiny Qwen2 + LoRA), batch {LORA_BATCH_SIZE}; launches: {epochs} epochs of"
            f" {per_epoch} steps, the first excluded"
        ),
        counts=REAL_COUNTS_QUICK if quick else REAL_COUNTS,
        record_args=lambda w: ["--num-workers", str(w), "--batch-size", str(LORA_BATCH_SIZE)],
        measure_command=measure,
        measured_key="steps_per_s_epochs",
        whole_epochs=True,
        inprocess_command=real_inprocess("lora", quick),
        inprocess_rounds=REAL_ROUNDS_QUICK if quick else REAL_ROUNDS,
        inprocess_processes=REAL_PROCESSES_QUICK if quick else REAL_PROCESSES,
        recordings=REAL_RECORDINGS,
        trial_recordings=REAL_TRIAL_RECORDINGS,
        extra_columns=(("launches inside an epoch", "steps_per_s_steady"),),
        unprofiled_checks=REAL_UNPROFILED_CHECKS,
    )


def trainer_case(quick: bool) -> Case:
    epochs = 2 if quick else 3
    return Case(
        name="trainer",
        description=(
            f"Hugging Face Trainer, tiny GPT-2, batch 4 (scripts/bench_trainer.py); launches: {epochs} epochs, the"
            " first excluded"
        ),
        counts=REAL_COUNTS_QUICK if quick else REAL_COUNTS,
        record_args=lambda w: [
            "--",
            "python",
            str(TRAINER),
            "--num-workers",
            str(w),
            "--epochs",
            str(TRAINER_RECORDED_EPOCHS),
        ],
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
        inprocess_command=real_inprocess("trainer", quick),
        inprocess_rounds=REAL_ROUNDS_QUICK if quick else REAL_ROUNDS,
        inprocess_processes=REAL_PROCESSES_QUICK if quick else REAL_PROCESSES,
        recordings=REAL_RECORDINGS,
        trial_recordings=REAL_TRIAL_RECORDINGS,
        extra_columns=(("launches inside an epoch", "steps_per_s_steady"),),
        unprofiled_checks=REAL_UNPROFILED_CHECKS,
    )


def all_cases(quick: bool) -> dict[str, Case]:
    cases = {name: synthetic_case(name, options) for name, options in SYNTHETIC.items()}
    cases["lora"] = lora_case(quick)
    cases["trainer"] = trainer_case(quick)
    return cases


# ------------------------------------------------------------------------------------ running and measuring


def run(command: list[str], what: str, case: str, piece: str) -> None:
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=REPO)
    timed(case, piece, time.perf_counter() - began)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit code {done.returncode}):\n$ {' '.join(command)}\n{done.stderr[-4000:]}")


def measure_once(case: Case, n: int, tmp: Path, repeat: int) -> dict:
    """One launch without dlprof at ``n`` workers: its report."""
    report = tmp / f"{case.name}-measured-{n}-{repeat}.json"
    run(case.measure_command(n, report), f"{case.name}: measuring num_workers={n}", case.name, "launch")
    result = json.loads(report.read_text())
    if result.get(case.measured_key) is None:
        raise SystemExit(f"{case.name}: {report} has no {case.measured_key} (too few whole epochs?): {result}")
    return result


def measure(case: Case, counts: list[int], tmp: Path, launches: int, runs: dict[int, list[dict]]) -> None:
    """Launches without dlprof until every count has ``launches``, the counts interleaved round by round."""
    for n in counts:
        runs.setdefault(n, [])
    for repeat in range(launches):
        for n in counts:
            if len(runs[n]) <= repeat:
                runs[n].append(measure_once(case, n, tmp, repeat))


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


def measure_inprocess(case: Case, counts: list[int], tmp: Path, rounds: int, process: int) -> dict[int, dict]:
    """One process of the in-process truth (scripts/measure_inprocess.py): per count, the median rate over its
    rounds, their spread, and every segment."""
    report = tmp / f"{case.name}-inprocess-{process}.json"
    run(case.inprocess_command(counts, rounds, report), f"{case.name}: in-process truth", case.name, "in-process")
    return {int(n): values for n, values in json.loads(report.read_text())["counts"].items()}


def range_pct(values: list[float], center: float) -> float:
    """The range of ``values`` as % of ``center``."""
    return 100 * (max(values) - min(values)) / center


def combine_inprocess(processes: list[dict[int, dict]]) -> dict[int, dict]:
    """Per count, over every process that trained it: the median of all their segments, their range (% of that
    median), each segment, and each process's own median."""
    combined = {}
    for n in sorted({n for process in processes for n in process}):
        ours = [process[n] for process in processes if n in process]
        segments = [rate for values in ours for rate in values["segments"]]
        median = statistics.median(segments)
        combined[n] = {
            "steps_per_s": median,
            "spread_pct": range_pct(segments, median),
            "segments": segments,
            "processes": [values["steps_per_s"] for values in ours],
        }
    return combined


def trials_of(report) -> dict | None:
    """The trials of a report (``RunReport.trials``) as plain numbers, the non-persistent settings by count."""
    trials = report.trials
    if trials is None:
        return None
    runs = {}
    for r in trials.settings:
        if r.persistent_workers:
            continue
        runs[r.num_workers] = {
            "steps_per_s": r.steps_per_s,
            "epoch_steps_per_s": r.epoch_steps_per_s,
            "spread_pct": r.speed.spread_pct if r.speed else None,
            "steps_timed": r.speed.steps if r.speed else 0,
            "trusted": r.speed.trusted if r.speed else False,
            "segments": r.segments,
            "restart_ms": r.restart_ms,
            "predicted_steps_per_s": r.predicted_steps_per_s,
            "error_pct": r.error_pct,
            "data_wait_pct": r.data_wait_pct,
        }
    return {
        "basis": trials.basis,
        "rounds": trials.rounds,
        "rounds_planned": trials.rounds_planned,
        "notes": list(trials.notes),
        "runs": runs,
    }


def record(
    case: Case, start: int, tmp: Path, attempt: int, try_workers: tuple[int, ...] | None, plain_launch: bool = False
) -> Recording:
    """Record at ``start`` (with ``try_workers``: and run the trials; with ``plain_launch``: and a plain launch of its
    command) and analyze it."""
    name = f"{case.name}-w{start}-{attempt}" + ("-trials" if try_workers else "")
    trial_args = ["--try-workers", ",".join(map(str, try_workers))] if try_workers else []
    trial_args += ["--plain-launch"] if plain_launch else []
    began = time.perf_counter()
    run(
        [sys.executable, "-m", "dlprof", "record", "--out", str(tmp), "--name", name, *trial_args]
        + case.record_args(start),
        f"dlprof record for {name}",
        case.name,
        "record with trials" if try_workers else "record",
    )
    analyzed = time.perf_counter()
    report = build_report(tmp / name).runs[0]
    timed(case.name, "analyze", time.perf_counter() - analyzed)
    advice, u = report.advice, report.unprofiled
    rate = (lambda p: p.effective_steps_per_s) if case.whole_epochs else (lambda p: p.steps_per_s)
    plain = u.plain_launch if u is not None else None
    if plain is not None:
        epochs = plain.epoch_after_effect_pct
        print(
            f"  {name}: the plain launch ran {plain.plain_steps_per_s:.2f} steps/s over {plain.steps} steady steps"
            f" (recording {plain.recorded_steps_per_s:.2f}: {plain.after_effect_pct:+.1f} %)"
            + (
                f", {plain.plain_epoch_steps_per_s:.2f} over whole epochs ({epochs:+.1f} %)"
                if epochs is not None
                else ""
            ),
            flush=True,
        )
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
    return Recording(
        start=start,
        attempt=attempt,
        predicted={p.num_workers: rate(p) for p in advice.predicted},
        recommended=advice.num_workers,
        rests_on=advice.rests_on,
        model_recommended=advice.model_num_workers,
        unprofiled=unprofiled,
        trials=trials_of(report),
        seconds=time.perf_counter() - began,
    )


def counts_to_measure(case: Case, recordings: dict[int, list[Recording]]) -> list[int]:
    """The counts both truths measure: the case's, and every count recommended so far."""
    chosen = {
        n for rs in recordings.values() for r in rs for n in (r.recommended, r.model_recommended) if n is not None
    }
    return sorted(set(case.counts) | chosen)


def launch_round(case: Case, counts: list[int], tmp: Path, runs: dict[int, list[dict]]) -> dict[int, float]:
    """One launch without dlprof at each of ``counts``, in that order (added to ``runs``): their measured speeds."""
    measured = {}
    for n in counts:
        result = measure_once(case, n, tmp, len(runs.setdefault(n, [])))
        runs[n].append(result)
        measured[n] = result[case.measured_key]
    return measured


def record_and_launch(
    case: Case, tmp: Path, plan: Plan
) -> tuple[dict[int, list[Recording]], dict[int, list[dict]], list[dict[int, dict]], list[dict[int, float]]]:
    """Every recording, the starts alternating, each followed by launches without dlprof and by a process of the
    in-process truth (while fewer than the case's ran): drifting load on the machine falls on the recordings and both
    truths alike. The first ``trial_recordings`` recordings from each start run the trials.

    A bracketed case launches every count once before the first trial recording and once after each (the order
    reversed from round to round): the launch truth is then made in the minutes of the trials, and each trial recording
    is compared with the two rounds around it (``Recording.bracket``; the rounds are returned last). Other recordings
    are followed by a launch at their count while it has fewer than ``plan.launches``."""
    recordings: dict[int, list[Recording]] = {start: [] for start in STARTS}
    runs: dict[int, list[dict]] = {start: [] for start in STARTS}
    inprocess: list[dict[int, dict]] = []
    brackets: list[dict[int, float]] = []
    processes = (plan.processes or case.inprocess_processes) if plan.inprocess and not plan.unprofiled_only else 0
    rounds = plan.rounds or case.inprocess_rounds
    with_trials = plan.trials and not plan.unprofiled_only
    trial_recordings = plan.trial_recordings or case.trial_recordings
    counts = list(case.counts)
    for attempt in range(plan.recordings or case.recordings):
        for start in STARTS:
            try_workers = case.counts if with_trials and attempt < trial_recordings else None
            bracketed = case.bracketed and try_workers is not None
            if bracketed and not brackets:
                brackets.append(launch_round(case, counts, tmp, runs))
            recording = record(case, start, tmp, attempt, try_workers, plan.plain_launch)
            if bracketed:
                brackets.append(launch_round(case, counts[::-1] if len(brackets) % 2 else counts, tmp, runs))
                recording = replace(recording, bracket=(len(brackets) - 2, len(brackets) - 1))
            elif len(runs[start]) < plan.launches:
                runs[start].append(measure_once(case, start, tmp, len(runs[start])))
            recordings[start].append(recording)
            if len(inprocess) < processes:
                inprocess.append(
                    measure_inprocess(case, counts_to_measure(case, recordings), tmp, rounds, len(inprocess))
                )
    while len(inprocess) < processes:  # more processes than recordings
        inprocess.append(measure_inprocess(case, counts_to_measure(case, recordings), tmp, rounds, len(inprocess)))
    return recordings, runs, inprocess, brackets


# ------------------------------------------------------------------------------------ comparing


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def signed(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f} %"


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def p90(values: list[float]) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] if ordered else None


def stats(errors: list[float]) -> dict:
    """Sizes of signed errors: how many, their median, p90 and max."""
    sizes = [abs(e) for e in errors]
    if not sizes:
        return {"points": 0, "median": None, "p90": None, "max": None}
    return {"points": len(sizes), "median": statistics.median(sizes), "p90": p90(sizes), "max": max(sizes)}


def error_stats(errors: list[float]) -> str:
    s = stats(errors)
    if not s["points"]:
        return "none"
    return f"median {pct(s['median'])}, p90 {pct(s['p90'])}, max {pct(s['max'])} ({s['points']} points)"


def relative(value: float | None, truth: float | None) -> float | None:
    return None if value is None or not truth else (value - truth) / truth


def median_predictions(recordings: list[Recording]) -> dict[int, float]:
    """Per count, the median prediction over the recordings that predict it."""
    counts = sorted({n for r in recordings for n in r.predicted})
    return {n: statistics.median(r.predicted[n] for r in recordings if n in r.predicted) for n in counts}


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


def prediction_table(
    case: Case, recordings: dict[int, list[Recording]], truths: dict[str, dict[int, float]], measured: dict[int, dict]
) -> dict:
    """The model's predictions against each truth; prints the case's table. Errors are signed."""
    counts = sorted(set(case.counts) | {n for rate in truths.values() for n in rate})
    repeats = len(recordings[STARTS[0]])
    predictions = {start: median_predictions(recordings[start]) for start in STARTS}
    print(
        f"\npredictions compared {case.basis}; predicted: median of {repeats} recording(s) per start; error:"
        " (predicted - truth) / truth\n"
    )
    header = ["num_workers", *(f"truth: {name}" for name in truths), *(label for label, _ in case.extra_columns)]
    for start in STARTS:
        header += [f"predicted from {start}", *(f"vs {name}" for name in truths)]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    errors: dict[str, list[float]] = {name: [] for name in truths}
    for n in counts:
        cells = [str(n), *(fmt(rate.get(n)) for rate in truths.values())]
        cells += [fmt(measured.get(n, {}).get(key)) for _, key in case.extra_columns]
        for start in STARTS:
            predicted = predictions[start].get(n)
            cells.append(fmt(predicted))
            for name, rate in truths.items():
                error = relative(predicted, rate.get(n))
                if error is not None:
                    errors[name].append(error)
                cells.append(signed(error))
        print("| " + " | ".join(cells) + " |")
    single = {
        name: [
            relative(r.predicted[n], rate[n])
            for start in STARTS
            for r in recordings[start]
            for n in counts
            if n in r.predicted and rate.get(n)
        ]
        for name, rate in truths.items()
    }
    print()
    for name in truths:
        print(
            f"model error against the {name} truth: {error_stats(errors[name])}; single recordings' errors:"
            f" {error_stats(single[name])}"
        )
    return {
        "predicted": predictions,
        "predicted_per_recording": {start: [r.predicted for r in recordings[start]] for start in STARTS},
        "errors": errors,
        "single_recording_errors": single,
    }


def recommendation_check(
    case: Case, recordings: dict[int, list[Recording]], truths: dict[str, dict[int, float]]
) -> list[dict]:
    """Every recommendation against the best measured count of each truth: reached share of the best, and whether it
    used more workers than the fewest within 2 %, dlprof's own rule (the target: within 5 % of the best, on the case's
    target truth)."""
    target = case.target_truth if case.target_truth in truths else LAUNCHES_TRUTH
    print(f"\nrecommendations against the best measured (target: within 5 % on the {target} truth)\n")
    checks = []
    for start in STARTS:
        for r in recordings[start]:
            picks = [("recommended", r.recommended)]
            if r.trials is not None:
                picks = [(f"recommended with trials (rests on {r.rests_on})", r.recommended)]
                picks.append(("the model's own pick", r.model_recommended))
            for label, chosen in picks:
                if chosen is None:
                    continue
                row = {"start": start, "attempt": r.attempt, "what": label, "num_workers": chosen}
                words = []
                for name, rate in truths.items():
                    best_at = max(rate, key=rate.get)
                    enough = min(n for n in rate if close_enough(rate[n], rate[best_at]))
                    reached = rate[chosen] / rate[best_at] if chosen in rate else None
                    row[name] = {"reached": reached, "best": rate[best_at], "best_at": best_at, "fewest_within": enough}
                    words.append(
                        f"{name}: {fmt(rate.get(chosen))} steps/s, {'-' if reached is None else pct(reached)} of the"
                        f" best ({rate[best_at]:.2f} at {best_at}; fewest within {CHOOSE_WITHIN:.0%}: {enough})"
                    )
                reached = row[target]["reached"]
                row["ok"] = reached is not None and reached >= WITHIN_BEST
                row["extra_workers"] = chosen > row[target]["fewest_within"]
                checks.append(row)
                print(
                    f"- from {start} (recording {r.attempt + 1}), {label}: {chosen} -> {'; '.join(words)} ->"
                    f" {'OK' if row['ok'] else 'MISSED'}{' (more workers than needed)' if row['extra_workers'] else ''}"
                )
    return checks


def trial_value(case: Case, run: dict) -> float | None:
    return run["epoch_steps_per_s"] if case.whole_epochs else run["steps_per_s"]


#: The trials' own truth in a bracketed case: the launches made right before and after each trial recording.
BRACKET_TRUTH = "launches around"


def bracket_truth(recording: Recording, brackets: list[dict[int, float]], n: int) -> float | None:
    """The launches' speed at ``n`` in the minutes of ``recording``'s trials: the mean of the rounds right before and
    after it (None when it was not bracketed)."""
    if recording.bracket is None:
        return None
    values = [brackets[i][n] for i in recording.bracket if n in brackets[i]]
    return statistics.fmean(values) if values else None


def trials_table(
    case: Case, recordings: dict[int, list[Recording]], truths: dict[str, dict[int, float]], brackets: list[dict]
) -> dict:
    """The trials' measured speeds against each truth, with their spread; prints the case's table.

    Per start and count, the trial is the median over the recordings with trials; in a bracketed case it is also
    compared with the launches right around those recordings (:func:`bracket_truth`, averaged over them): the truth
    of the same minutes, from fewer launches."""
    tried = {start: [r for r in recordings[start] if r.trials is not None] for start in STARTS}
    if not any(tried.values()):
        return {}
    bases = ", ".join(
        f"from {s}: "
        + "; ".join(f"{r.trials['basis']}, {r.trials['rounds']}/{r.trials['rounds_planned']} rounds" for r in rs)
        for s, rs in tried.items()
        if rs
    )
    names = [*truths, *([BRACKET_TRUTH] if any(r.bracket for rs in tried.values() for r in rs) else [])]
    repeats = max(len(rs) for rs in tried.values())
    print(
        f"\ntrials (dlprof record --try-workers {','.join(map(str, case.counts))}, the median of {repeats} recording(s)"
        f" per start) compared {case.basis} (dlprof's own basis: {bases}); spread: the range of the rounds' rates, % of"
        " the speed, per recording; error: (trial - truth) / truth"
        + (
            f"; '{BRACKET_TRUTH}': the launches right before and after each trial recording, averaged over them"
            if BRACKET_TRUTH in names
            else ""
        )
        + "\n"
    )
    header = ["num_workers", *(f"truth: {name}" for name in truths)]
    for start in STARTS:
        header += [f"trials from {start}", "each (spread, steps timed)"]
        header += [f"truth: {BRACKET_TRUTH}"] if BRACKET_TRUTH in names else []
        header += [f"vs {name}" for name in names]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    errors: dict[str, list[float]] = {name: [] for name in names}
    points = []
    for n in case.counts:
        cells = [str(n), *(fmt(rate.get(n)) for rate in truths.values())]
        for start in STARTS:
            ran = [(r, r.trials["runs"][n]) for r in tried[start] if n in r.trials["runs"]]
            values = [(r, run, trial_value(case, run)) for r, run in ran]
            values = [(r, run, v) for r, run, v in values if v is not None]
            if not values:
                cells += ["-", "-", *("-" for _ in names[len(truths) :]), *("-" for _ in names)]
                continue
            value = statistics.median(v for _, _, v in values)
            around = [bracket_truth(r, brackets, n) for r, _, _ in values]
            around_truth = statistics.fmean(around) if None not in around else None
            point = {
                "start": start,
                "num_workers": n,
                "measured": value,
                "each": [v for _, _, v in values],
                "spread_pct": max(
                    (run["spread_pct"] for _, run, _ in values if run["spread_pct"] is not None), default=None
                ),
                "steps_timed": sum(run["steps_timed"] for _, run, _ in values),
                "trusted": all(run["trusted"] for _, run, _ in values),
                "runs": [run for _, run, _ in values],
                "around": around,
            }
            each = ", ".join(
                f"{v:.2f} ({fmt(run['spread_pct'], '.1f')} %, {run['steps_timed']})" for _, run, v in values
            )
            cells += [fmt(value), each]
            if BRACKET_TRUTH in names:
                cells.append(fmt(around_truth))
            for name in names:
                error = relative(value, around_truth if name == BRACKET_TRUTH else truths[name].get(n))
                point[f"vs_{name}"] = error
                if error is not None:
                    errors[name].append(error)
                cells.append(signed(error))
            points.append(point)
        print("| " + " | ".join(cells) + " |")
    print()
    for name in names:
        print(f"trials against the {name} truth: {error_stats(errors[name])}")
    for start, rs in tried.items():
        for r in rs:
            for note in r.trials.get("notes", []):
                print(f"- trials from {start} (recording {r.attempt + 1}): {note}")
    return {
        "errors": errors,
        "points": points,
        "trials": {start: [r.trials for r in rs] for start, rs in tried.items()},
    }


def paired_errors(reports: list[dict], attr: str, launches: list[float | None]) -> list[float]:
    """Each recording's unprofiled speed against the launch made right after it at its count (the i-th launch follows
    the i-th recording where the case is not bracketed): a drift over the minutes of the run falls on both sides of a
    pair alike, where it would not on the two medians."""
    return [
        u[attr] / launch - 1
        for u, launch in zip(reports, launches)
        if u.get(attr) is not None and launch is not None and launch > 0
    ]


def paired_text(paired: list[float]) -> str:
    if not paired:
        return "-"
    return f"{signed(statistics.median(paired))}; {signed(min(paired))} to {signed(max(paired))}"


def unprofiled_check(
    case: Case, recordings: dict[int, list[Recording]], measured: dict[int, dict], inprocess: dict[int, dict] | None
) -> list[dict]:
    """The report's unprofiled speed at each recorded count against the truth without dlprof at that count: a
    Markdown table, and one row per (count, basis) with the median recording's error and the worst single one."""
    launches = len(next(iter(measured.values()))["runs"])
    print(
        "\nunprofiled speed at the recorded count (dlprof analyze: steady reference steps over their time) against the"
        f" truth from separate launches (median of {launches}); target within {pct(TARGET_UNPROFILED_ERROR)}\n"
    )
    print(
        "| recorded at | basis | truth steps/s | dlprof steps/s (median) | error | each recording | worst |"
        " paired (median; range) | steady steps (left out) | spread | trusted | in-process truth | error |"
    )
    print("|" + "---|" * 13)
    rows = []
    for start in STARTS:
        reports = [r.unprofiled for r in recordings[start]]
        for basis, truth_key, attr in case.unprofiled_checks:
            truth = measured[start].get(truth_key)
            values = [u.get(attr) for u in reports if u.get(attr) is not None]
            if truth is None or not values:
                print(f"| {start} | {basis} | {fmt(truth)} |" + " - |" * 10)
                continue
            errors = [(v - truth) / truth for v in values]
            median = statistics.median(values)
            paired = [] if case.bracketed else paired_errors(reports, attr, measured[start]["runs_by_key"][truth_key])
            same_basis = inprocess is not None and basis == case.basis and start in inprocess
            inprocess_truth = inprocess[start]["steps_per_s"] if same_basis else None
            row = {
                "recorded_at": start,
                "basis": basis,
                "truth": truth,
                "dlprof": values,
                "error": (median - truth) / truth,
                "worst": max(errors, key=abs),
                "paired": paired,
                "paired_error": statistics.median(paired) if paired else None,
                "inprocess_truth": inprocess_truth,
                "inprocess_error": relative(median, inprocess_truth),
            }
            rows.append(row)
            steps = ", ".join(f"{u.get('steps')} ({u.get('left_out')})" for u in reports)
            spreads = ", ".join(f"{fmt(u.get('spread_pct'), '.0f')} %" for u in reports)
            print(
                f"| {start} | {basis} | {truth:.2f} | {median:.2f} | {signed(row['error'])} |"
                f" {', '.join(f'{v:.2f}' for v in values)} | {signed(row['worst'])} | {paired_text(paired)} |"
                f" {steps} | {spreads} |"
                f" {sum(bool(u.get('trusted')) for u in reports)}/{len(reports)} | {fmt(inprocess_truth)} |"
                f" {signed(row['inprocess_error'])} |"
            )
    floors = {basis: noise_floor(measured, key) for basis, key, _ in case.unprofiled_checks}
    print(
        "\nnoise floor of the truth (one launch against the median of the others at its count): "
        + "; ".join(f"{basis}: {error_stats(floor)}" for basis, floor in floors.items())
    )
    return rows


def recorded_prediction_check(
    case: Case, recordings: dict[int, list[Recording]], measured: dict[int, dict]
) -> list[dict]:
    """The model's prediction at the recorded count (on the case's basis: the number the report's table prints for
    the setting the user runs) against plain launches at that count: the median of the recordings against the median
    of the launches, and paired (each recording against the launch right after it, where not bracketed)."""
    rows = []
    for start in STARTS:
        values = [r.predicted[start] for r in recordings[start] if start in r.predicted]
        truth = measured.get(start, {}).get(case.measured_key)
        if not values or not truth:
            continue
        launches = measured[start]["runs"]
        paired = (
            []
            if case.bracketed
            else [
                r.predicted[start] / launch - 1
                for r, launch in zip(recordings[start], launches)
                if start in r.predicted
            ]
        )
        rows.append(
            {
                "recorded_at": start,
                "truth": truth,
                "predicted": values,
                "error": statistics.median(values) / truth - 1,
                "paired": paired,
                "paired_error": statistics.median(paired) if paired else None,
            }
        )
    if rows:
        print(
            f"\nthe prediction at the recorded count ({case.basis}) against plain launches at that count (median of"
            f" {len(next(iter(measured.values()))['runs'])}); target within {pct(TARGET_UNPROFILED_ERROR)}\n"
        )
        print(
            "| recorded at | launches steps/s | predicted (median) | error | each recording | paired (median; range) |"
        )
        print("|" + "---|" * 6)
        for row in rows:
            print(
                f"| {row['recorded_at']} | {row['truth']:.2f} | {statistics.median(row['predicted']):.2f} |"
                f" {signed(row['error'])} | {', '.join(f'{v:.2f}' for v in row['predicted'])} |"
                f" {paired_text(row['paired'])} |"
            )
    return rows


# ------------------------------------------------------------------------------------ one case, and the summaries


def bench_case(case: Case, tmp: Path, plan: Plan) -> dict:
    began = time.perf_counter()
    recordings, runs, processes, brackets = record_and_launch(case, tmp, plan)
    counts = sorted(STARTS) if plan.unprofiled_only else counts_to_measure(case, recordings)
    measure(case, counts, tmp, plan.launches, runs)
    measured = summarize(case, runs)
    inprocess = None
    if processes:
        missing = [n for n in counts if not any(n in process for process in processes)]
        if missing:  # a count recommended by the last recording alone
            processes.append(
                measure_inprocess(case, missing, tmp, plan.rounds or case.inprocess_rounds, len(processes))
            )
        inprocess = combine_inprocess(processes)
    truths = {LAUNCHES_TRUTH: {n: measured[n][case.measured_key] for n in counts}}
    if inprocess is not None:
        truths[INPROCESS_TRUTH] = {n: inprocess[n]["steps_per_s"] for n in counts}
    print(f"\n### {case.name}: {case.description}\n")
    print(f"truth from separate launches: median of {plan.launches} launch(es) per count", end="")
    if inprocess is not None:
        spreads = [v["spread_pct"] for v in inprocess.values()]
        print(
            f"; in one process: median of {len(processes)} process(es) x {plan.rounds or case.inprocess_rounds}"
            f" round(s) per count, run between the recordings; spread of the segments median"
            f" {statistics.median(spreads):.1f} %, max {max(spreads):.1f} %",
            end="",
        )
    floor = noise_floor(measured)
    print(
        "\n\nnoise floor (one launch without dlprof against the median of the others at its count):"
        f" {error_stats(floor)}"
    )
    result = {
        "description": case.description,
        "basis": case.basis,
        "target_truth": case.target_truth,
        "counts": counts,
        "recordings": {start: [asdict(r) for r in recordings[start]] for start in STARTS},
        "measured": measured,
        "inprocess": inprocess,
        "truths": truths,
        "noise_floor": floor,
        "errors": {},
        "recommendations": [],
        "trials": {},
        "brackets": brackets,
    }
    if not plan.unprofiled_only:
        result.update(prediction_table(case, recordings, truths, measured))
        result["trials"] = trials_table(case, recordings, truths, brackets)
        result["recommendations"] = recommendation_check(case, recordings, truths)
    result["unprofiled"] = unprofiled_check(case, recordings, measured, inprocess)
    result["recorded_prediction"] = recorded_prediction_check(case, recordings, measured)
    result["seconds"] = time.perf_counter() - began
    print("\n" + case_line(case.name, result))
    return result


def case_line(name: str, result: dict) -> str:
    """One line per case: the model's error against each truth, the trials', the recommendations."""
    parts = [f"model vs {truth}: {error_stats(errors)}" for truth, errors in result["errors"].items()]
    parts += [
        f"trials vs {truth}: {error_stats(errors)}" for truth, errors in result["trials"].get("errors", {}).items()
    ]
    checks = result["recommendations"]
    if checks:
        parts.append(f"recommendations within 5 % of the best: {sum(c['ok'] for c in checks)}/{len(checks)}")
    worst = max((abs(row["error"]) for row in result["unprofiled"]), default=None)
    if worst is not None:
        parts.append(f"unprofiled speed worst {pct(worst)}")
    return f"**{name}: " + "; ".join(parts) + ".**"


def print_unprofiled_summary(results: dict) -> None:
    rows = [(name, row) for name, r in results.items() for row in r["unprofiled"]]
    if not rows:
        return
    print(
        "\n## Unprofiled speed at the recorded count against the truth without dlprof\n\n| case | recorded at | basis |"
        " truth (launches) | dlprof (median of recordings) | error | worst recording | paired (median; range) |"
        " noise floor (max) | in-process truth | error |\n|" + "---|" * 11
    )
    for name, row in rows:
        floor = results[name]["noise_floor"]
        print(
            f"| {name} | {row['recorded_at']} | {row['basis']} | {row['truth']:.2f} |"
            f" {statistics.median(row['dlprof']):.2f} | {signed(row['error'])} | {signed(row['worst'])} |"
            f" {paired_text(row['paired'])} |"
            f" {pct(max(floor)) if floor else '-'} | {fmt(row['inprocess_truth'])} | {signed(row['inprocess_error'])} |"
        )


def print_case_summary(results: dict) -> None:
    print(
        "\n## Per case\n\n| case | compared | model vs launches (median / p90 / max) | model vs in-process"
        " (median / p90 / max) | trials vs launches around them (max) | trials vs launches (max) | trials vs"
        " in-process (max) | widest trial spread | recommendations OK | unprofiled (worst) | launch noise floor (max)"
        " |\n|" + "---|" * 11
    )
    for name, r in results.items():
        model = {truth: stats(r["errors"].get(truth, [])) for truth in (LAUNCHES_TRUTH, INPROCESS_TRUTH)}
        trials = {
            truth: stats(r["trials"].get("errors", {}).get(truth, []))
            for truth in (BRACKET_TRUTH, LAUNCHES_TRUTH, INPROCESS_TRUTH)
        }
        spreads = [p["spread_pct"] for p in r["trials"].get("points", []) if p.get("spread_pct") is not None]
        checks = r["recommendations"]
        ok = f"{sum(c['ok'] for c in checks)}/{len(checks)}" if checks else "-"
        worst = max((abs(row["error"]) for row in r["unprofiled"]), default=None)
        three = lambda s: "-" if not s["points"] else f"{pct(s['median'])} / {pct(s['p90'])} / {pct(s['max'])}"
        one = lambda s: "-" if not s["points"] else pct(s["max"])
        print(
            f"| {name} | {r['basis']} | {three(model[LAUNCHES_TRUTH])} | {three(model[INPROCESS_TRUTH])} |"
            f" {one(trials[BRACKET_TRUTH])} | {one(trials[LAUNCHES_TRUTH])} | {one(trials[INPROCESS_TRUTH])} |"
            f" {'-' if not spreads else f'{max(spreads):.1f} %'} |"
            f" {ok} |"
            f" {'-' if worst is None else pct(worst)} | {pct(max(r['noise_floor'])) if r['noise_floor'] else '-'} |"
        )


def worst_point(points: list[tuple[float, str]]) -> tuple[float | None, str]:
    """The largest |error| and where it was."""
    if not points:
        return None, ""
    error, where = max(points, key=lambda p: abs(p[0]))
    return abs(error), where


def truth_processes_apart(results: dict, names: list[str]) -> list[float]:
    """Per count of each case in ``names``: its in-process truth's process medians, the range as % of the truth."""
    apart = []
    for name in names:
        for count in (results[name].get("inprocess") or {}).values():
            processes = count.get("processes", [])
            if len(processes) >= 2 and count["steps_per_s"] > 0:
                apart.append(range_pct(processes, count["steps_per_s"]))
    return apart


def targets(results: dict, cases: dict[str, Case]) -> list[dict]:
    """The issue's targets over every case run: what each measured, and whether it was met (None: nothing to
    judge, e.g. no synthetic case run)."""
    synthetic = [name for name in results if not cases[name].whole_epochs]
    real = [name for name in results if cases[name].whole_epochs]
    # The separate-launch truth: in a bracketed case the median of the launches made around the trial recordings. The
    # per-case table also compares each recording with the two rounds right around it (fewer launches, more noise).
    # The points the report itself told its user not to trust (a spread between rounds over MAX_SPREAD_PCT) are named
    # beside the verdict, which counts them all the same.
    trial_points: list[tuple[float, str]] = []
    untrusted: set[str] = set()
    for name in synthetic:
        for p in results[name]["trials"].get("points", []):
            if p.get(f"vs_{LAUNCHES_TRUTH}") is None:
                continue
            where = f"{name} at {p['num_workers']} from {p['start']}"
            trial_points.append((p[f"vs_{LAUNCHES_TRUTH}"], where))
            if not p.get("trusted", True):
                untrusted.add(where)
    real_points = [(e, name) for name in real for e in results[name]["errors"].get(INPROCESS_TRUTH, [])]
    synthetic_errors = [abs(e) for name in synthetic for e in results[name]["errors"].get(LAUNCHES_TRUTH, [])]
    checks = [(c, name) for name, r in results.items() for c in r["recommendations"]]
    # Against each case's own yardstick: the launches for the synthetic cases; the in-process truth for the real ones
    # (on its basis, whole epochs), whose launches stray from each other by more than the target.
    unprofiled = [
        (row["error"], f"{name} at {row['recorded_at']}, {row['basis']}")
        for name in synthetic
        for row in results[name]["unprofiled"]
    ] + [
        (row["inprocess_error"], f"{name} at {row['recorded_at']}, {row['basis']}, in-process truth")
        for name in real
        for row in results[name]["unprofiled"]
        if row["inprocess_error"] is not None
    ]
    rows = []

    def add(target: str, value: float | None, limit: float, numbers: str) -> None:
        rows.append(
            {
                "target": target,
                "value": value,
                "limit": limit,
                "met": None if value is None else value <= limit,
                "numbers": numbers,
            }
        )

    worst, where = worst_point(trial_points)
    numbers = "no trials"
    if worst is not None:
        within = sum(abs(error) <= TARGET_TRIALS_ERROR for error, _ in trial_points)
        flagged = ", flagged untrusted in its report" if where in untrusted else ""
        numbers = f"worst {pct(worst)} ({where}{flagged}) over {len(trial_points)} points, {within} within 5 %"
        trusted_worst, trusted_where = worst_point([p for p in trial_points if p[1] not in untrusted])
        if untrusted and trusted_worst is not None:
            numbers += (
                f"; {len(untrusted)} flagged untrusted in their reports, the worst of the others {pct(trusted_worst)}"
                f" ({trusted_where})"
            )
    add(
        "trials within 5 % of the separate-launch truth (synthetic: the median of the launches made around the trial"
        " recordings), every synthetic case, count and start",
        worst,
        TARGET_TRIALS_ERROR,
        numbers,
    )
    worst, where = worst_point(real_points)
    numbers = "no real case with in-process truth"
    if worst is not None:
        numbers = f"worst {pct(worst)} ({where}) over {len(real_points)} points"
        # How well the truth itself is known: its processes' medians apart, per count (verdict unchanged).
        apart = truth_processes_apart(results, real)
        if apart:
            numbers += (
                f"; the in-process truth's processes stood {statistics.median(apart):.1f} % apart (median over"
                f" counts; max {max(apart):.1f} %)"
            )
    add(
        "real cases: every prediction within 10 % of the in-process truth, every count, both starts",
        worst,
        TARGET_REAL_ERROR,
        numbers,
    )
    median = statistics.median(synthetic_errors) if synthetic_errors else None
    add(
        "synthetic prediction error median ≤ 3 % (separate-launch truth)",
        median,
        TARGET_SYNTHETIC_MEDIAN,
        f"median {pct(median)} over {len(synthetic_errors)} points" if median is not None else "no synthetic case",
    )
    high = p90(synthetic_errors)
    add(
        "synthetic prediction error p90 ≤ 8 % (separate-launch truth)",
        high,
        TARGET_SYNTHETIC_P90,
        f"p90 {pct(high)}, max {pct(max(synthetic_errors))}" if high is not None else "no synthetic case",
    )
    missed = [f"{name}: {c['what']} {c['num_workers']} from {c['start']}" for c, name in checks if not c["ok"]]
    lowest = min(
        (
            c[cases[name].target_truth if cases[name].target_truth in c else LAUNCHES_TRUTH]["reached"] or 0
            for c, name in checks
        ),
        default=None,
    )
    add(
        "every recommendation within 5 % of the best measured (synthetic: launches; real: in-process)",
        None if not checks else len(missed),
        0,
        f"{len(checks) - len(missed)}/{len(checks)} within; lowest reached {pct(lowest)} of the best"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        if checks
        else "no recommendation checked",
    )
    recorded = [
        (row["error"], f"{name} at {row['recorded_at']}")
        for name in real
        for row in results[name].get("recorded_prediction", [])
    ]
    worst, where = worst_point(recorded)
    add(
        "real cases: the prediction at the recorded count within 5 % of plain launches measured in the same run"
        " (median of recordings against the median of launches), both starts",
        worst,
        TARGET_UNPROFILED_ERROR,
        f"worst {pct(worst)} ({where}) over {len(recorded)} checks" if worst is not None else "no real case",
    )
    worst, where = worst_point(unprofiled)
    add(
        "unprofiled speed at the recorded count within 5 % of the truth, every case (median of recordings; synthetic:"
        " launches; real: in-process)",
        worst,
        TARGET_UNPROFILED_ERROR,
        f"worst {pct(worst)} ({where}) over {len(unprofiled)} checks" if worst is not None else "nothing checked",
    )
    return rows


def print_targets(rows: list[dict]) -> None:
    print("\n## Targets (issue 13)\n\n| target | result | numbers |\n|---|---|---|")
    for row in rows:
        verdict = "n/a" if row["met"] is None else "met" if row["met"] else "MISSED"
        print(f"| {row['target']} | {verdict} | {row['numbers']} |")


def print_timings(total_s: float) -> None:
    print("\n## Time taken\n\n| case | piece | runs | total s | each s (mean) |\n|---|---|---|---|---|")
    for case, pieces in TIMINGS.items():
        for piece, seconds in pieces.items():
            print(f"| {case} | {piece} | {len(seconds)} | {sum(seconds):.0f} | {statistics.mean(seconds):.1f} |")
    print(f"\ntotal: {total_s / 60:.1f} minutes")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one recording per start, one launch per count, fewer real-model counts, shorter in-process segments"
        " (without --cases: two synthetic cases)",
    )
    parser.add_argument(
        "--cases", help=f"comma-separated case names: {', '.join([*SYNTHETIC, 'lora', 'trainer'])} [default: all]"
    )
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument(
        "--recordings",
        type=int,
        help=f"dlprof recordings per start [default: synthetic {SYNTHETIC_RECORDINGS}, real {REAL_RECORDINGS}; --quick"
        f" {RECORDINGS_QUICK}]",
    )
    parser.add_argument(
        "--trial-recordings",
        type=int,
        help=f"of those, how many (the first) run the trials [default: synthetic {SYNTHETIC_TRIAL_RECORDINGS}, real"
        f" {REAL_TRIAL_RECORDINGS}]",
    )
    parser.add_argument(
        "--launches",
        type=int,
        help=f"launches without dlprof per count, the truth their median [default: {LAUNCHES}; --quick"
        f" {LAUNCHES_QUICK}]",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"rounds of the in-process truth [default: synthetic {SYNTHETIC_ROUNDS}, real {REAL_ROUNDS}; --quick"
        f" {REAL_ROUNDS_QUICK}]",
    )
    parser.add_argument(
        "--allocator",
        choices=("fixed", "glibc"),
        default="fixed",
        help="glibc malloc in every process started: fixed thresholds (no per-process page-fault levels) or glibc's"
        " defaults [default: fixed]",
    )
    parser.add_argument(
        "--processes",
        type=int,
        help=f"processes of the in-process truth [default: synthetic {SYNTHETIC_PROCESSES}, real {REAL_PROCESSES};"
        f" --quick {REAL_PROCESSES_QUICK}]",
    )
    parser.add_argument(
        "--plain-launch",
        action="store_true",
        help="record with --plain-launch: each recording's predictions scaled to a plain launch of its command",
    )
    parser.add_argument("--no-trials", action="store_true", help="no recording runs the in-process trials")
    parser.add_argument("--no-inprocess", action="store_true", help="no in-process truth (separate launches only)")
    parser.add_argument(
        "--unprofiled-only",
        action="store_true",
        help="check only the report's unprofiled speed at the recorded counts against the truth (no model tables)",
    )
    args = parser.parse_args()
    for name in ("recordings", "trial_recordings", "launches", "rounds", "processes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} {value}: must be >= 1")
    if args.json is not None and not args.json.resolve().parent.is_dir():
        parser.error(f"--json {args.json}: its folder does not exist; create it or write the JSON elsewhere")
    known = [*SYNTHETIC, "lora", "trainer"]
    args.names = [name.strip() for name in (args.cases or "").split(",") if name.strip()]
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"--cases: unknown case(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return args


def main() -> None:
    began = time.perf_counter()
    args = parse_args()
    cases = all_cases(args.quick)
    names = args.names or (list(QUICK_DEFAULT) if args.quick else list(cases))
    plan = Plan(
        recordings=args.recordings or (RECORDINGS_QUICK if args.quick else None),
        launches=args.launches or (LAUNCHES_QUICK if args.quick else LAUNCHES),
        trials=not args.no_trials,
        inprocess=not args.no_inprocess,
        unprofiled_only=args.unprofiled_only,
        rounds=args.rounds,
        processes=args.processes,
        trial_recordings=args.trial_recordings,
        plain_launch=args.plain_launch,
    )
    if args.allocator == "fixed":
        os.environ.update(FIXED_ALLOCATOR_ENV)  # inherited by every process started from here
    print(
        f"allocator: {args.allocator}"
        + (f" ({' '.join(f'{k}={v}' for k, v in FIXED_ALLOCATOR_ENV.items())})" if args.allocator == "fixed" else "")
    )
    results = {}

    def write_json(rows: list[dict] | None) -> None:
        # After every case too, so that a long run that fails later keeps what it measured.
        if args.json:
            summary = {
                "plan": asdict(plan),
                "quick": args.quick,
                "allocator": args.allocator,
                "cases": results,
                "targets": rows,
            }
            summary.update(timings=TIMINGS, total_s=time.perf_counter() - began, complete=rows is not None)
            args.json.write_text(json.dumps(summary, indent=1))

    with tempfile.TemporaryDirectory() as tmp_name:
        for name in names:
            results[name] = bench_case(cases[name], Path(tmp_name), plan)
            write_json(None)
    print_unprofiled_summary(results)
    if not args.unprofiled_only:
        print_case_summary(results)
    rows = targets(results, cases)
    print_targets(rows)
    print_timings(time.perf_counter() - began)
    write_json(rows)


if __name__ == "__main__":
    main()
