"""How fast, and in how much memory, is `dlprof analyze` on big traces, next to HTA loading the same file?

    python scripts/bench_analyze.py                       # record the built-in workload (~25 s), then 100 and 300 MB
    python scripts/bench_analyze.py --trace RUN_OR_TRACE --sizes 100,300,1000 --work /tmp/big --hta-max-mb 300

Times ``dlprof analyze`` on the recorded run (median of 3), then builds traces of the chosen sizes (MB of
uncompressed JSON) by repeating that run's steps (``scripts/make_big_trace.py``) and, for each, measures
side by side, each in a fresh process as a user runs it:

- ``dlprof analyze TRACE --format json``: wall time and peak RSS;
- HTA's ``TraceAnalysis(trace_dir=...)`` on a directory holding just that trace: wall time and peak RSS
  (up to ``--hta-max-mb``; past ``--hta-timeout`` it is stopped and reported as "> N s").

Peak RSS is the child's ``ru_maxrss`` from ``os.wait4``. ``--dlprof-root`` benchmarks another source tree
(a copy of an earlier version) the same way. Targets: peak RSS at most 2 x the JSON, 1 GB in under 30 s,
and at least 8 x faster than HTA's load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_trace import make_big_trace

ROOT = Path(__file__).resolve().parent.parent
HTA_LOAD = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1])"


def measure(command: list[str], cwd: Path, env: dict, timeout_s: float) -> tuple[float, float | None, str, bool]:
    """Run ``command`` in a fresh process: (wall s, peak RSS in MB, stdout, timed out)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            wall = time.perf_counter() - start
            if pid:
                break
            if wall > timeout_s:
                os.killpg(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                child.returncode = -9
                return wall, usage.ru_maxrss / 1024, "", True
            time.sleep(0.02)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({child.returncode}):\n{err.read().decode()[-3000:]}")
        return wall, usage.ru_maxrss / 1024, out.read().decode(), False


def json_bytes(trace: Path) -> int:
    with (gzip.open if trace.name.endswith(".gz") else open)(trace, "rb") as f:
        return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 24), b""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace", type=Path, help="a real trace or run directory (default: record the built-in workload)"
    )
    parser.add_argument(
        "--sizes", default="100,300", help="MB of JSON for the repeated traces, comma-separated (default 100,300)"
    )
    parser.add_argument(
        "--work", type=Path, help="where to keep the big traces (reused when there; default: a temporary directory)"
    )
    parser.add_argument(
        "--hta-max-mb", type=float, default=300, help="run HTA's load on traces up to this size (default 300)"
    )
    parser.add_argument(
        "--hta-timeout", type=float, default=600, help="stop HTA's load after this many seconds (default 600)"
    )
    parser.add_argument(
        "--dlprof-root", type=Path, default=ROOT, help="source tree of the dlprof to measure (default: this one)"
    )
    args = parser.parse_args()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(args.dlprof_root.resolve()), os.environ.get("PYTHONPATH", "")]),
    }
    with tempfile.TemporaryDirectory() as tmp_name:
        work = args.work or Path(tmp_name)
        work.mkdir(parents=True, exist_ok=True)
        base = args.trace
        if base is None:
            base = work / "base"
            if not base.is_dir():
                done = subprocess.run(
                    [sys.executable, "-m", "dlprof", "record", "--out", str(work), "--name", "base"],
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if done.returncode != 0:
                    raise SystemExit(done.stderr)
        if base.is_dir():
            base = sorted(p for p in base.iterdir() if p.name.endswith((".json", ".json.gz")))[0]
        dlprof = [sys.executable, "-m", "dlprof", "analyze", "--format", "json"]
        print(f"dlprof from {args.dlprof_root}", file=sys.stderr)
        print(
            "| trace | JSON | events | dlprof analyze | dlprof peak RSS (x JSON) | HTA load | HTA peak RSS (x JSON) |"
            " HTA / dlprof |"
        )
        print("|---|---|---|---|---|---|---|---|")
        runs = [measure([*dlprof, str(base)], work, env, 600) for _ in range(3)]
        report = json.loads(runs[-1][2])
        mb = json_bytes(base) / 1e6
        rss = max(r[1] for r in runs)
        print(
            f"| recorded run ({report['steps']['count']} steps) | {mb:.0f} MB | |"
            f" {statistics.median(r[0] for r in runs):.2f} s (median of 3) | {rss:.0f} MB ({rss / mb:.1f} x) | | | |",
            flush=True,
        )
        for size in (float(s) for s in args.sizes.split(",") if s):
            big = work / f"big{size:g}" / "big.pt.trace.json.gz"  # a directory of its own: HTA reads every trace there
            if not big.is_file():
                made = make_big_trace(base, big, size)
                (big.parent / "events.txt").write_text(str(made["events"]))  # not .json: HTA would read it
            events = int((big.parent / "events.txt").read_text()) if (big.parent / "events.txt").is_file() else None
            mb = json_bytes(big) / 1e6
            seconds, rss, out, _ = measure([*dlprof, str(big)], work, env, 1800)
            steps = json.loads(out)["steps"]["count"]
            hta = ratio = ""
            if mb <= args.hta_max_mb:
                hta_s, hta_rss, _, timed_out = measure(
                    [sys.executable, "-c", HTA_LOAD, str(big.parent)], work, env, args.hta_timeout
                )
                hta = (
                    f"> {args.hta_timeout:.0f} s | > {hta_rss:.0f} MB"
                    if timed_out
                    else f"{hta_s:.1f} s | {hta_rss:.0f} MB ({hta_rss / mb:.1f} x)"
                )
                ratio = f"{'> ' if timed_out else ''}{hta_s / seconds:.1f} x"
            else:
                hta = "not run | "
            print(
                f"| repeated to {steps} steps | {mb:.0f} MB ({big.stat().st_size / 1e6:.0f} MB gz) | {events or ''} |"
                f" {seconds:.2f} s | {rss:.0f} MB ({rss / mb:.1f} x) | {hta} | {ratio} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
