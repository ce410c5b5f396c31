"""How long the dlprof tab of TensorBoard takes to show a run's report: the first load (the run analysed in the
plugin's background thread) and the second (from the cache), through a real ``tensorboard`` process.

    python scripts/bench_tensorboard_tab.py LOGDIR [--runs NAME,NAME] [--rounds 3]

Each round starts TensorBoard afresh on a free port (an empty cache), asks for every run's report until it is
served, then asks again; it prints the seconds of each load and their medians. Stop nothing by hand: TensorBoard is
ended by its PID when the round ends.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

#: How long a report may take before the round gives up on it (seconds).
LOAD_LIMIT_S = 300
POLL_S = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_until_up(base: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"tensorboard ended with exit code {process.returncode} before answering")
        try:
            if get(f"{base}/data/plugins_listing")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("tensorboard did not answer within 120 s")


def load_s(base: str, run: str) -> float:
    """Seconds from the first request of ``run``'s report to the report served (202 while it is analysed)."""
    url = f"{base}/data/plugin/dlprof/report?run={urllib.parse.quote(run)}"
    start = time.perf_counter()
    while time.perf_counter() - start < LOAD_LIMIT_S:
        status, body = get(url)
        if status == 200:
            return time.perf_counter() - start
        if status != 202:
            sys.exit(f"{run}: the tab answered {status}: {body[:200]!r}")
        time.sleep(POLL_S)
    sys.exit(f"{run}: no report within {LOAD_LIMIT_S} s")


def one_round(logdir: Path, runs: list[str] | None) -> dict[str, tuple[float, float]]:
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port)]
    process = subprocess.Popen([*command, "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        listed = [r["name"] for r in json.loads(get(f"{base}/data/plugin/dlprof/runs")[1])["runs"]]
        chosen = runs or listed
        missing = sorted(set(chosen) - set(listed))
        if missing:
            sys.exit(f"not under {logdir}: {', '.join(missing)} (the tab lists {', '.join(listed)})")
        return {run: (load_s(base, run), load_s(base, run)) for run in chosen}
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--runs", help="comma-separated run names as the tab lists them (default: every run)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs = args.runs.split(",") if args.runs else None
    rounds = [one_round(args.logdir, runs) for _ in range(args.rounds)]
    for run in rounds[0]:
        first = [r[run][0] for r in rounds]
        second = [r[run][1] for r in rounds]
        print(
            f"{run}: first load {statistics.median(first):.2f} s (rounds: {', '.join(f'{s:.2f}' for s in first)}),"
            f" cached {statistics.median(second):.3f} s (rounds: {', '.join(f'{s:.3f}' for s in second)})"
        )


if __name__ == "__main__":
    main()
