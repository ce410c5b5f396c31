"""Write tests/data/tiny_trials_trace.json: the hand-written dlprof trace with in-process trials (``--try-workers``).

It is ``tests/data/tiny_dlprof_trace.json`` with every time multiplied by :data:`SCALE` (steps of tens of ms, as
a small real training has, so that the trials time the seconds a trusted speed needs), manifest version 3, 40-step
epochs, and the trials of ``--try-workers 0,1,2 --try-persistent`` over two rounds appended to its step clock: every
step's wall and wait time written out below, so that the expected numbers can be worked out by hand
(tests/analysis/test_trials.py works out the ones it checks).

    python scripts/make_trials_trace.py        # rewrites the file; review the diff
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "tiny_dlprof_trace.json"
TARGET = ROOT / "tests" / "data" / "tiny_trials_trace.json"
#: Times of the source trace are multiplied by this.
SCALE = 40
#: Batches per epoch of the fixture's loader (one batch per step: 40 steps per epoch).
EPOCH_BATCHES = 40
#: Steps per trial segment.
SEGMENT_STEPS = 52

# Each setting's steps as (wall ms, wait ms) after its switch, repeating ``steady``; ``first``: the steps right after
# the switch (batches the previous setting left in flight, the new workers starting).
SETTINGS = {
    # No workers: every step loads its own batch (wait 20 ms); the first two take the recorded worker's batches.
    (0, False): {"first": [(26.0, 0.1), (26.0, 0.1)], "steady": [(44.0, 20.0)]},
    # One worker: steps alternate, one waits a little.
    (1, False): {"first": [(150.0, 120.0), (24.0, 0.1), (24.0, 0.1)], "steady": [(27.0, 3.0), (24.0, 0.1)]},
    # Two workers: bursty, one step in three waits for the slower worker (median 19 ms, mean 24 ms).
    (2, False): {
        "first": [(180.0, 150.0), (19.0, 0.1), (19.0, 0.1), (19.0, 0.1), (19.0, 0.1)],
        "steady": [(34.0, 15.0), (19.0, 0.1), (19.0, 0.1)],
    },
    (1, True): {"first": [(150.0, 120.0), (24.0, 0.1), (24.0, 0.1)], "steady": [(27.0, 3.0), (24.0, 0.1)]},
    (2, True): {
        "first": [(180.0, 150.0), (19.0, 0.1), (19.0, 0.1), (19.0, 0.1), (19.0, 0.1)],
        "steady": [(34.0, 15.0), (19.0, 0.1), (19.0, 0.1)],
    },
}
#: Order of the settings in each round: every other round reversed.
ROUND_ORDER = [(0, False), (1, False), (2, False), (1, True), (2, True)]
#: Switch timings (ms) per setting: shut-down of the previous setting's workers, creating the iterator, its first batch.
SWITCH = {
    (0, False): {"start_ms": 0.1, "first_batch_ms": 30.0},
    (1, False): {"start_ms": 40.0, "first_batch_ms": 150.0},
    (2, False): {"start_ms": 60.0, "first_batch_ms": 180.0},
    (1, True): {"start_ms": 40.0, "first_batch_ms": 160.0},
    (2, True): {"start_ms": 60.0, "first_batch_ms": 190.0},
}
SHUTDOWN_MS = {0: 0.0, 1: 20.0, 2: 30.0}
#: In round 1 the (2, False) segment crosses an epoch end at this step of the segment: workers restart there, the
#: restart measured at a real epoch boundary.
BOUNDARY_AT = 24
BOUNDARY_STEPS = [(260.0, 230.0), (19.0, 0.1), (19.0, 0.1), (19.0, 0.1), (19.0, 0.1)]
#: The second round's steady steps are this much slower (drift, another process on the machine): the spread.
ROUND_1_SLOWER = 1.02


def _scale(document: dict) -> None:
    for event in document["traceEvents"]:
        for key in ("ts", "dur"):
            if key in event:
                event[key] *= SCALE
        args = event.get("args", {})
        for key in ("cpu_us", "runq_us"):
            if key in args:
                args[key] *= SCALE
    manifest = document["dlprof"]
    for key in ("wall_ms", "cpu_ms", "runq_ms", "wait_ms"):
        manifest["step_clock"][key] = [round(v * SCALE, 3) for v in manifest["step_clock"][key]]
    for key in ("cpu_ms_per_step", "wall_ms_per_step"):
        manifest["main_process_cpu"][key] = round(manifest["main_process_cpu"][key] * SCALE, 3)
    for epoch in manifest["loader"]["epochs"]:
        epoch["first_batch_ms"] *= SCALE


def _segment_steps(setting: tuple[int, bool], round_: int) -> list[tuple[float, float, bool]]:
    plan = SETTINGS[setting]
    steps = [(wall, wait, False) for wall, wait in plan["first"]]
    slower = ROUND_1_SLOWER if round_ == 1 else 1.0
    while len(steps) < SEGMENT_STEPS:
        steps += [(round(wall * slower, 3), wait, False) for wall, wait in plan["steady"]]
    boundary = round_ == 1 and setting == (2, False)
    steps = steps[:SEGMENT_STEPS]
    if boundary:
        inserted = [(wall, wait, i == 0) for i, (wall, wait) in enumerate(BOUNDARY_STEPS)]
        steps[BOUNDARY_AT : BOUNDARY_AT + len(inserted)] = inserted
    return steps


def _append_trials(manifest: dict) -> None:
    clock = manifest["step_clock"]
    segments = []
    previous = manifest["loader"]["num_workers"]
    for round_ in range(2):
        order = ROUND_ORDER if round_ % 2 == 0 else ROUND_ORDER[::-1]
        for setting in order:
            first = len(clock["phase"])
            steps = _segment_steps(setting, round_)
            for wall, wait, epoch_start in steps:
                clock["phase"].append("trial")  # manifest.PHASE_TRIAL: unprofiled, at the settings tried
                clock["wall_ms"].append(wall)
                clock["cpu_ms"].append(round(wall * 0.9, 3))
                clock["runq_ms"].append(0.0)
                clock["wait_ms"].append(wait)
                clock["batches"].append(1)
                clock["epoch_start"].append(epoch_start)
                clock["fork_probe"].append(False)
            segments.append(
                {
                    "num_workers": setting[0],
                    "persistent_workers": setting[1],
                    "round": round_,
                    "first_step": first,
                    "steps": len(steps),
                    "drain_ms": 2.0 * previous,
                    "shutdown_ms": SHUTDOWN_MS[previous],
                    **SWITCH[setting],
                    "at_epoch_start": False,
                }
            )
            previous = setting[0]
    manifest["trials"] = {
        "counts": [0, 1, 2],
        "rounds": 2,
        "trial_steps": 40,
        "persistent": True,
        "loader": 0,
        "segments": segments,
        "incomplete": None,
    }
    manifest["steps"]["run"] = len(clock["phase"])


def main() -> None:
    document = json.loads(SOURCE.read_text(encoding="utf-8"))
    _scale(document)
    manifest = document["dlprof"]
    manifest["manifest_version"] = 3
    manifest["loader"]["length"] = EPOCH_BATCHES
    _append_trials(manifest)
    TARGET.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(manifest['step_clock']['phase'])} steps")


if __name__ == "__main__":
    main()
