"""How fast is `dlprof analyze`? The default workload's run, and a trace of over 100 MB.

    python scripts/bench_analyze.py      # ~1-2 minutes

Records the built-in workload with default settings, times ``dlprof analyze`` on it (a fresh process
each time, as a user runs it; median of 3), then builds a ~100 MB trace by repeating that run's steps
end to end (events shifted in time, ProfilerStep numbers continued, batch indices kept unique) and
times the analysis of that too. Targets: under 5 s and under 30 s.
"""
from __future__ import annotations

import copy
import math
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlprof import schema

TARGET_MB = 100


def timed_analyze(path: Path, repeats: int) -> tuple[float, str]:
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "dlprof", "analyze", str(path), "--format", "json"], capture_output=True, text=True)
        timings.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
    return statistics.median(timings), done.stdout


def enlarge(trace: Path, out: Path, target_mb: int) -> tuple[int, int]:
    """Repeat the trace's timed events until the JSON is ``target_mb`` MB; returns (MB, steps)."""
    with gzip.open(trace, "rt") as f:
        document = json.load(f)
    events = document["traceEvents"]
    timed = [e for e in events if "ts" in e and e.get("ph") in ("X", "C", "i", "s", "f")]
    span_us = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed) - min(float(e["ts"]) for e in timed)
    steps = [e for e in timed if str(e.get("name", "")).startswith("ProfilerStep#")]
    one_copy_mb = len(json.dumps(timed)) / 1e6
    copies = max(1, math.ceil(target_mb / one_copy_mb))
    for k in range(1, copies):
        for event in timed:
            clone = copy.deepcopy(event)
            clone["ts"] = float(event["ts"]) + k * (span_us + 1000)
            name = str(clone.get("name", ""))
            if name.startswith("ProfilerStep#"):
                clone["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * len(steps)}"
            args = clone.get("args")
            if isinstance(args, dict) and schema.ARG_EPOCH in args:
                args[schema.ARG_EPOCH] = args[schema.ARG_EPOCH] + 1000 * k  # keep (loader, epoch, batch) unique
            events.append(clone)
    data = json.dumps(document).encode()
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(data)
    return round(len(data) / 1e6), len(steps) * copies


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        done = subprocess.run([sys.executable, "-m", "dlprof", "record", "--out", str(tmp), "--name", "default"], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        (trace,) = (tmp / "default").glob("*" + schema.TRACE_SUFFIX)
        seconds, _ = timed_analyze(tmp / "default", 3)
        size_mb = trace.stat().st_size / 1e6
        with gzip.open(trace, "rb") as f:
            raw_mb = len(f.read()) / 1e6
        print("| trace | size | events | analyze (median) | target |\n|---|---|---|---|---|")
        events = len(json.loads(gzip.open(trace).read())["traceEvents"])
        print(f"| default workload run | {raw_mb:.0f} MB JSON ({size_mb:.1f} MB gz) | {events} | {seconds:.2f} s | < 5 s |")
        big = tmp / "big" / "big.pt.trace.json.gz"
        big.parent.mkdir()
        mb, steps = enlarge(trace, big, TARGET_MB)
        seconds, report = timed_analyze(big, 1)
        events = len(json.loads(gzip.open(big).read())["traceEvents"])
        assert json.loads(report)["steps"]["count"] == steps
        print(f"| the same, repeated to {steps} steps | {mb} MB JSON ({big.stat().st_size / 1e6:.0f} MB gz) | {events} | {seconds:.2f} s | < 30 s |")


if __name__ == "__main__":
    main()
