"""How fast, and in how much memory, is `dlprof analyze` on big traces, next to HTA loading the same file?

    python scripts/bench_analyze.py                       # record the built-in workload (~25 s), then 100 and 300 MB
    python scripts/bench_analyze.py --trace RUN_OR_TRACE --sizes 100,300,1000 --work /tmp/big --hta-max-mb 300
    python scripts/bench_analyze.py --trace RUN_OR_TRACE --ranks 16     # many ranks: --processes 1, 2, --ray local, HTA

Times ``dlprof analyze`` on the recorded run (median of 3), then builds traces of the chosen sizes (MB of
uncompressed JSON) by repeating that run's steps (``scripts/make_big_trace.py``) and, for each, measures
side by side, each in a fresh process as a user runs it:

- ``dlprof analyze TRACE --format json``: wall time and peak RSS;
- HTA's ``TraceAnalysis(trace_dir=...)`` on a directory holding just that trace: wall time and peak RSS
  (up to ``--hta-max-mb``; past ``--hta-timeout`` it is stopped and reported as "> N s").

Peak RSS is the child's ``ru_maxrss`` from ``os.wait4``. ``--dlprof-root`` benchmarks another source tree
(a copy of an earlier version) the same way. Targets: peak RSS at most 2 x the JSON, 1 GB in under 30 s,
and at least 8 x faster than HTA's load.

``--ranks N``: a run of N ranks, each a copy of the real trace with its own rank (``scripts/make_ranks.py``),
analysed by ``dlprof analyze RUN --format json`` at ``--processes 1`` and ``--processes 2`` (interleaved, median of
``--repeat``) and with ``--ray local`` (when Ray is installed), next to HTA's ``TraceAnalysis(trace_dir=RUN)``
(which parses the ranks in a process pool of its own). For each, the wall time (``--processes``: plain runs, nothing
else on the cores), and, from a run of its own, the peak memory of every process of the command's tree (``VmHWM``
from /proc, sampled every 20 ms until each process ends, which takes a share of 2 cores; the whole tree's largest
is checked against the ``ru_maxrss`` of ``wait4``), by role: the command's own process, its workers, and the
rest (the fork server, Ray's services). Then the extrapolation to 256 ranks of 1 GB, with its arithmetic.
Targets (issue 14): on 2 cores ``--processes 2`` at least 1.6 x faster than ``--processes 1`` on 16 ranks, and no
process past 2.5 x the biggest trace.
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
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_trace import make_big_trace
from make_ranks import make_ranks

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


def _hwm_mb(pid: int) -> float | None:
    """A process's peak resident memory so far (``VmHWM``), in MB."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        pass
    return None


def _role(process: psutil.Process, root: int, forkservers: set[int]) -> str:
    """What a process of the command's tree is: the command, a worker (forked by the fork server, or a Ray
    worker), or something else (the fork server, the resource tracker, Ray's services)."""
    if process.pid == root:
        return "command"
    try:
        cmdline = " ".join(process.cmdline())
        parent = process.ppid()
        forked = cmdline == " ".join(psutil.Process(root).cmdline())  # a fork of the command (HTA's pool)
    except psutil.Error:
        return "other"
    if "forkserver" in cmdline and parent == root:
        forkservers.add(process.pid)
        return "fork server"
    if parent in forkservers or cmdline.startswith("ray::") or forked:
        return "worker"
    return "other"


def measure_tree(command: list[str], cwd: Path, env: dict, timeout_s: float) -> dict:
    """Run ``command`` in a fresh process: wall s, stdout, the tree's largest ``ru_maxrss`` (MB), and each process's
    peak memory (MB) by role, sampled every 20 ms until it ends."""
    peaks: dict[int, tuple[str, float]] = {}
    forkservers: set[int] = set()
    stop = threading.Event()

    def sample(root: int) -> None:
        roles: dict[int, str] = {}
        while not stop.is_set():
            try:
                tree = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
            except psutil.Error:
                tree = []
            for process in tree:
                if roles.get(process.pid, "other") == "other":  # a Ray worker names itself once started
                    roles[process.pid] = _role(process, root, forkservers)
                hwm = _hwm_mb(process.pid)
                if hwm is not None:
                    peaks[process.pid] = (roles[process.pid], max(hwm, peaks.get(process.pid, ("", 0.0))[1]))
            stop.wait(0.02)

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
        sampler = threading.Thread(target=sample, args=(child.pid,), daemon=True)
        sampler.start()
        timed_out = False
        try:
            while True:
                pid, status, usage = os.wait4(child.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - start > timeout_s:
                    os.killpg(child.pid, signal.SIGKILL)
                    _, status, usage = os.wait4(child.pid, 0)
                    timed_out = True
                    break
                time.sleep(0.02)
        finally:
            stop.set()
            sampler.join()
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if not timed_out and os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode()[-3000:]}")
        by_role: dict[str, list[float]] = {}
        for role, mb in peaks.values():
            by_role.setdefault(role, []).append(mb)
        return {
            "wall": wall,
            "stdout": out.read().decode(),
            "maxrss": usage.ru_maxrss * 1024 / 1e6,
            "roles": by_role,
            "timed_out": timed_out,
        }


def _memory(result: dict, trace_mb: float) -> str:
    roles = result["roles"]
    parts = [f"command {max(roles.get('command', [0])):.0f} MB ({max(roles.get('command', [0])) / trace_mb:.1f} x)"]
    if roles.get("worker"):
        workers = roles["worker"]
        parts.append(f"{len(workers)} workers, largest {max(workers):.0f} MB ({max(workers) / trace_mb:.1f} x)")
    if roles.get("fork server"):
        parts.append(f"fork server {max(roles['fork server']):.0f} MB")
    if roles.get("other"):
        parts.append(f"{len(roles['other'])} others, largest {max(roles['other']):.0f} MB")
    return "; ".join(parts)


def ranks_mode(args: argparse.Namespace, base: Path, work: Path, env: dict) -> None:
    """``--ranks N``: N copies of ``base`` as one run, analysed at --processes 1 and 2, with --ray local, and by HTA."""
    run = work / f"ranks{args.ranks}"
    if not run.is_dir():
        make_ranks(base, run, args.ranks)
    trace_mb = json_bytes(next(run.iterdir())) / 1e6
    bare = measure_tree([sys.executable, "-c", "import dlprof.cli, dlprof.workflows.analyze"], work, env, 60)
    print(f"{args.ranks} ranks of {trace_mb:.1f} MB of JSON each ({base.name}); {psutil.cpu_count()} cores.")
    print(f"A bare process importing the analyze path peaks at {bare['maxrss']:.0f} MB.\n")
    dlprof = [sys.executable, "-m", "dlprof", "analyze", str(run), "--format", "json"]
    modes = {"--processes 1": [*dlprof, "--processes", "1"], "--processes 2": [*dlprof, "--processes", "2"]}
    # Speed from plain runs, interleaved so that the machine's load falls on both alike. The memory sampler takes a
    # share of 2 cores (16 ranks: 1.53 x with it, 1.62 x without, measured), so memory comes from runs of their own.
    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    reports: set[str] = set()
    for _ in range(args.repeat):
        for mode, command in modes.items():
            wall, _, stdout, _ = measure(command, work, env, 1800)
            walls[mode].append(wall)
            reports.add(stdout)
    results: dict[str, list[dict]] = {mode: [measure_tree(command, work, env, 1800)] for mode, command in modes.items()}
    if not args.no_ray and _ray_installed(env):
        results["--ray local"] = [
            measure_tree([*dlprof, "--ray", "local"], work, env, 1800) for _ in range(max(1, args.repeat // 2))
        ]
        walls["--ray local"] = [r["wall"] for r in results["--ray local"]]
    reports |= {r["stdout"] for rs in results.values() for r in rs}
    hta = None if args.no_hta else measure_tree([sys.executable, "-c", HTA_LOAD, str(run)], work, env, args.hta_timeout)
    if hta:
        results["HTA TraceAnalysis"], walls["HTA TraceAnalysis"] = [hta], [hta["wall"]]
    print(
        "| analysis | wall (median; plain runs, Ray's and HTA's sampled) | spread | tree's largest process |"
        " each process's peak (x one trace; a sampled run) |"
    )
    print("|---|---|---|---|---|")
    for mode, rs in results.items():
        times = sorted(walls[mode])
        wall = f"> {args.hta_timeout:.0f} s (stopped)" if rs[0]["timed_out"] else f"{statistics.median(times):.2f} s"
        print(
            f"| {mode} | {wall} | {times[0]:.2f}-{times[-1]:.2f} s ({len(times)} runs) |"
            f" {max(r['maxrss'] for r in rs):.0f} MB | {_memory(max(rs, key=lambda r: r['maxrss']), trace_mb)} |"
        )
    print(f"\nSame JSON report from every dlprof run: {len(reports) == 1} ({len(reports)} distinct)")
    one = statistics.median(walls["--processes 1"])
    two = statistics.median(walls["--processes 2"])
    ratios = sorted(a / b for a, b in zip(walls["--processes 1"], walls["--processes 2"], strict=True))
    print(f"each round's ratio: {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")
    print(
        f"--processes 2 is {one:.2f} / {two:.2f} = {one / two:.2f} x faster than --processes 1 (target: at least 1.6 x)"
    )
    for mode, rs in results.items():  # what each process grew by, above what it started from
        command = max(max(r["roles"].get("command", [0])) for r in rs)
        line = (
            f"{mode}: the command's process {command:.0f} MB, {(command - bare['maxrss']) / trace_mb:.1f} x one trace"
        )
        line += f" above a bare process's {bare['maxrss']:.0f} MB"
        workers = [max(r["roles"]["worker"]) for r in rs if r["roles"].get("worker")]
        servers = [max(r["roles"]["fork server"]) for r in rs if r["roles"].get("fork server")]
        if workers:
            start = min(servers) if servers else bare["maxrss"]
            line += f"; largest worker {max(workers):.0f} MB, {(max(workers) - start) / trace_mb:.1f} x above the"
            line += f" {start:.0f} MB it starts from"
            line += " (the fork server)" if servers else " (forked from the command, which starts as a bare process)"
        print(line + " (target: at most 2.5 x)")
    extrapolate(args.ranks, trace_mb, one - bare["wall"], two - bare["wall"], hta and hta["wall"], bare["wall"])


def _ray_installed(env: dict) -> bool:
    done = subprocess.run([sys.executable, "-c", "import ray"], env=env, capture_output=True)
    return done.returncode == 0


def extrapolate(ranks: int, trace_mb: float, one_s: float, two_s: float, hta_s: float | None, start_s: float) -> None:
    """256 ranks of 1 GB, from the per-GB time measured here, the parallel efficiency measured at --processes 2 and
    the memory bound of --processes' default: ceil(256 / processes) waves of one rank's time over the efficiency.
    ``one_s`` and ``two_s`` are the walls less ``start_s``, a bare process's start (Python and dlprof's imports)."""
    per_gb = one_s / ranks / trace_mb * 1000
    efficiency = one_s / two_s / 2
    peak_gb = 1.6 * 1 + 0.04  # PEAK_PER_JSON_BYTE x 1 GB + WORKER_BASE_BYTES
    print(f"\nExtrapolation to 256 ranks of 1 GB of JSON each (256 GB), the walls less {start_s:.2f} s of start-up:")
    print(
        f"  one rank: {one_s:.2f} s / {ranks} ranks / {trace_mb:.1f} MB x 1000 = {per_gb:.1f} s per GB (issue 8"
        f" measured 16.6 s on one 1 GB trace); efficiency at --processes 2: {one_s:.2f} / {two_s:.2f} / 2 ="
        f" {efficiency:.2f};"
        f" a worker's peak: 1.6 x 1 GB + 0.04 GB = {peak_gb:.2f} GB"
    )
    print(f"  --processes 1: 256 x {per_gb:.1f} s = {256 * per_gb / 3600:.2f} h")
    setups = (("this machine, 2 cores, 24 GB", 1, 2, 24), ("one node, 64 cores, 512 GB", 1, 64, 512))
    for label, nodes, cores, memory_gb in (*setups, ("Ray, 8 such nodes (--ray auto)", 8, 64, 512)):
        per_node = min(cores, int(memory_gb // peak_gb))
        processes = nodes * per_node
        waves = -(-256 // processes)
        seconds = waves * per_gb / efficiency
        print(
            f"  {label}: {nodes} x min({cores} cores, {memory_gb} GB / {peak_gb:.2f} GB) = {processes} at once ->"
            f" ceil(256 / {processes}) = {waves} x {per_gb:.1f} s / {efficiency:.2f} = {seconds / 60:.1f} min"
        )
    if hta_s is None:
        return
    hta_per_gb = hta_s / ranks / trace_mb * 1000
    print(
        f"  HTA's TraceAnalysis here: {hta_s:.1f} s for the {ranks} ranks (its own process pool) = {hta_per_gb:.0f} s"
        f" per GB of ranks -> 256 GB: {256 * hta_per_gb / 3600:.1f} h on this machine, at 7.5-8.1 x the JSON in"
        " memory per trace (the table in docs/validation.md): 7-8 GB per 1 GB rank"
    )


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
    parser.add_argument("--ranks", type=int, help="many-ranks mode: a run of this many ranks (see above)")
    parser.add_argument("--repeat", type=int, default=3, help="many-ranks mode: runs of each --processes (default 3)")
    parser.add_argument("--no-ray", action="store_true", help="many-ranks mode: leave --ray local out")
    parser.add_argument("--no-hta", action="store_true", help="many-ranks mode: leave HTA out")
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
        if args.ranks:
            ranks_mode(args, base, work, env)
            return
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
