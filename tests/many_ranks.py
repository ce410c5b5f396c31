"""Runs of many ranks for tests, without recording them: hand-made traces, one per rank, written on the fly.

:func:`write_job` writes a data-parallel job whose every number is set here: each rank's data wait and
own compute per step, and the collective in which it waits for the slowest rank. In step ``i`` (all
ranks start it together, on one clock) a rank waits ``data_us[i]`` in ``__next__``, computes
``compute_us[i]`` (``aten::linear``), launches its all-reduce (``c10d::allreduce_``, 10 µs) and then
waits in gloo's all-reduce, on another thread, until 100 µs before the step ends. Every step lasts
``max over ranks of (data + compute) + STEP_SLACK_US``. So per step and rank: collectives =
step - 100 - data - compute, own work = data + compute + 100, other = 100 - 10 (the launch is a collective).

:func:`replicate_tiny` copies tests/data/tiny_dlprof_trace.json (a dlprof trace with its manifest, a
worker and its spans) once per rank, with the rank and the host set in the manifest and every time of
its events multiplied by a factor per rank: a realistic report of many ranks, made in milliseconds.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

from conftest import DATA_DIR

#: Each step is this much longer than the slowest rank's data wait and compute (collective launch and work, other).
STEP_SLACK_US = 200
#: The ProfilerStep number of the first step.
FIRST_STEP = 5
NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@dataclass(frozen=True)
class RankSpec:
    """One rank: its host, and its data wait and compute in each step (µs)."""

    rank: int
    host: str
    data_us: tuple[int, ...]
    compute_us: tuple[int, ...]


def _events(spec: RankSpec, step_us: list[int]) -> list[dict]:
    x = lambda cat, name, ts, dur, tid=1: {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
    }
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    start = 0
    for i, length in enumerate(step_us):
        data, compute = spec.data_us[i], spec.compute_us[i]
        launch = start + data + compute
        events += [
            x("user_annotation", f"ProfilerStep#{FIRST_STEP + i}", start, length),
            x("user_annotation", NEXT, start, data),
            x("cpu_op", "aten::linear", start + data, compute),
            x("cpu_op", "c10d::allreduce_", launch, 10),
            x("user_annotation", "gloo:all_reduce", launch + 10, start + length - 100 - launch - 10, tid=2),
        ]
        start += length
    return events


def write_job(directory: Path, specs: list[RankSpec]) -> Path:
    """One run directory ``directory`` with a trace per rank, named ``<host>_<pid>.<ms>.pt.trace.json`` as
    torch.profiler names them (the host is read from the name: these traces have no manifest)."""
    steps = len(specs[0].data_us)
    step_us = [max(s.data_us[i] + s.compute_us[i] for s in specs) + STEP_SLACK_US for i in range(steps)]
    directory.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        document = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "gloo", "rank": spec.rank, "world_size": len(specs)},
            "baseTimeNanoseconds": 1_000_000_000_000,
            "traceEvents": _events(spec, step_us),
        }
        name = f"{spec.host}_{1000 + spec.rank}.1700000000000.pt.trace.json"
        (directory / name).write_text(json.dumps(document), encoding="utf-8")
    return directory


def uniform_job(
    directory: Path, ranks: int, ranks_per_node: int, slow: dict[int, tuple[int, int]] | None = None
) -> Path:
    """``ranks`` ranks, ``ranks_per_node`` per host ``node<k>``: each waits 100 + 10 * (rank % 7) µs for data and
    computes 400 + 10 * (rank % 5) µs, in step 0; 10 % more in step 1. ``slow``: rank -> (extra data µs, extra
    compute µs) in every step."""
    specs = []
    for rank in range(ranks):
        extra_data, extra_compute = (slow or {}).get(rank, (0, 0))
        data = 100 + 10 * (rank % 7) + extra_data
        compute = 400 + 10 * (rank % 5) + extra_compute
        specs.append(
            RankSpec(rank, f"node{rank // ranks_per_node}", (data, data * 11 // 10), (compute, compute * 11 // 10))
        )
    return write_job(directory, specs)


def replicate_tiny(
    directory: Path,
    ranks: int,
    ranks_per_node: int,
    factor=lambda rank: 1 + rank / 100,
    world_size: int | None = None,
) -> Path:
    """tests/data/tiny_dlprof_trace.json once per rank (hosts ``host<k>``, ``ranks_per_node`` each), every event time
    multiplied by ``factor(rank)``. ``world_size`` (default ``ranks``): the job's, as the manifests say; ranks from
    ``ranks`` up to it left no trace."""
    world_size = ranks if world_size is None else world_size
    template = json.loads((DATA_DIR / "tiny_dlprof_trace.json").read_text(encoding="utf-8"))
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        document = copy.deepcopy(template)
        host = f"host{rank // ranks_per_node}"
        document["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world_size}
        document["dlprof"].update(rank=rank, world_size=world_size)
        document["dlprof"]["host"]["hostname"] = host
        scale = factor(rank)
        for event in document["traceEvents"]:
            for key in ("ts", "dur"):
                if key in event:
                    event[key] = round(event[key] * scale, 3)
        # Named rank<R>_...: the host in the name is not the manifest's, which is the one to read.
        name = f"rank{rank}_{2000 + rank}.1700000000000.pt.trace.json"
        (directory / name).write_text(json.dumps(document), encoding="utf-8")
    return directory
