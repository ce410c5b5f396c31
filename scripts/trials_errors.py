"""The model's errors beside the in-process trials of recorded runs, as the report shows them (at the trials' pace)
and as the model made them (anchored to the reference steps), one line per run, and the counts within a target.

    python scripts/trials_errors.py traces/claim/slow0 traces/claim/slow2 [--target-pct 10]

Each argument is a run directory recorded with trials (``dlprof record --try-workers``, or ``dlprof sweep``'s one
launch). The code on ``PYTHONPATH`` analyses them, so the same recordings can be read by two versions of dlprof.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.workflows.analyze import build_report  # noqa: E402


def _cell(error: float | None) -> str:
    return "pace" if error is None else f"{error:+5.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories recorded with trials")
    parser.add_argument("--target-pct", type=float, default=10.0, help="how close a prediction must come, %%")
    args = parser.parse_args(argv)
    paced_in = paced_all = raw_in = raw_all = runs_paced = runs_raw = 0
    for run_dir in args.runs:
        run = build_report(run_dir).runs[0]
        trials = run.trials
        if trials is None or trials.pace is None:
            print(f"{run_dir}: no trials, or no pace (the recorded setting was not measured or not predicted)")
            continue
        cells, paced_ok, raw_ok = [], True, True
        for setting in sorted(trials.settings, key=lambda s: (s.num_workers, s.persistent_workers)):
            measured = trials.measured(setting)
            if measured is None or setting.predicted_steps_per_s is None or setting.error_pct is None:
                continue
            cells.append(
                f"{setting.num_workers}{'p' if setting.persistent_workers else ''}: {measured:5.2f} measured,"
                f" {_cell(setting.paced_error_pct)} paced, {setting.error_pct:+5.1f}% anchored"
            )
            if setting.paced_error_pct is not None:
                paced_all += 1
                paced_in += abs(setting.paced_error_pct) < args.target_pct
                paced_ok &= abs(setting.paced_error_pct) < args.target_pct
            raw_all += 1
            raw_in += abs(setting.error_pct) < args.target_pct
            raw_ok &= abs(setting.error_pct) < args.target_pct
        runs_paced += paced_ok
        runs_raw += raw_ok
        pace = trials.pace
        print(f"{run_dir} (x{pace.factor:.3f}, moved {pace.moved_pct:+.1f} %) | " + " | ".join(cells))
    print(
        f"within {args.target_pct:g} %: paced {paced_in} of {paced_all} points, every count in {runs_paced} run(s);"
        f" anchored {raw_in} of {raw_all} points, every count in {runs_raw} run(s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
