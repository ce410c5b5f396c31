"""Shared fixtures: real `dlprof record` runs, recorded once per test session."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
SCRIPTS_DIR = TESTS_DIR / "scripts"
DATA_DIR = TESTS_DIR / "data"
#: Small enough that one built-in workload record takes ~10 s here, large enough for several batches
#: per worker inside the window.
SMALL_WORKLOAD = (
    "--wait",
    "1",
    "--warmup",
    "2",
    "--active",
    "8",
    "--reference-steps",
    "6",
    "--batch-size",
    "2",
    "--max-length",
    "128",
)


def run_dlprof(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m dlprof ARGS`` as a user would, capturing its output; the traces a ``record`` or ``sweep``
    wrote are checked for what Perfetto would warn about (:func:`check_recorded_traces`)."""
    started_s = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "dlprof", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if args and args[0] in ("record", "sweep"):
        options = args[: args.index("--")] if "--" in args else args
        out = Path(options[options.index("--out") + 1]) if "--out" in options else Path("traces")
        check_recorded_traces(out if out.is_absolute() else Path(cwd or ".") / out, since_s=started_s)
    return done


def check_recorded_traces(out: Path, since_s: float = 0.0) -> None:
    """Fails if a trace under ``out`` written since ``since_s`` (time.time()) has complete events that partly overlap
    on one thread, or an unnamed track (tests/trace_checks.py). Every end-to-end recording is checked here."""
    from trace_checks import assert_perfetto_clean

    for path in sorted(out.rglob("*.pt.trace.json.gz")) if out.is_dir() else []:
        if path.stat().st_mtime >= since_s - 1:  # the filesystem's timestamps may be coarser than time.time()
            assert_perfetto_clean(path)


def unique_copy(source: Path, tmp_path: Path) -> Path:
    """A copy of ``source`` under a path of this test's own: its processes are found by their command line."""
    copy = tmp_path / f"{tmp_path.name}-{source.name}"
    copy.write_bytes(source.read_bytes())
    return copy


def trace_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("*.pt.trace.json.gz"))


def load_trace(run_dir: Path) -> dict:
    """The one trace document of a run directory."""
    files = trace_files(run_dir)
    assert len(files) == 1, f"expected one trace in {run_dir}, found {files}"
    with gzip.open(files[0], "rt") as f:
        return json.load(f)


def _record(out: Path, name: str, *args: str) -> Path:
    done = run_dlprof("record", "--out", str(out), "--name", name, *args)
    assert done.returncode == 0, f"dlprof record failed:\n{done.stdout}\n{done.stderr}"
    return out / name


@pytest.fixture(scope="session")
def traces_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("traces")


@pytest.fixture(scope="session")
def workload_run_2(traces_root) -> Path:
    """The built-in LoRA workload with two DataLoader workers."""
    return _record(traces_root, "workload-w2", *SMALL_WORKLOAD, "--num-workers", "2")


@pytest.fixture(scope="session")
def workload_run_0(traces_root) -> Path:
    """The built-in LoRA workload loading in the main process."""
    return _record(traces_root, "workload-w0", *SMALL_WORKLOAD, "--num-workers", "0")


@pytest.fixture(scope="session")
def data_bound_run(traces_root) -> Path:
    """A user script whose dataset sleeps 5 ms a sample, loaded in the main process: data-bound."""
    return _record(
        traces_root,
        "data-bound",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "6",
        "--",
        "python",
        str(SCRIPTS_DIR / "slow_dataset.py"),
        "--num-workers",
        "0",
    )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device; without one they are skipped, not failed."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)


def invoke(*args):
    """Run the ``dlprof`` Click group in-process, as a user would type the arguments. An exception that the command
    does not turn into its exit code (a bug) is raised here, with its traceback, rather than kept in the result
    (where a test that reads only stdout saw an empty output)."""
    from click.testing import CliRunner

    from dlprof.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="dlprof", catch_exceptions=False)


def assert_one_line_error(result, *fragments: str) -> str:
    """The command failed with exit code 2 and one line on stderr, no traceback, naming every fragment."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output and lines[0].startswith("dlprof"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def leftover_processes(marker: str) -> list[int]:
    """Pids of processes whose command line mentions ``marker``: none may outlive a ``dlprof record``."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in process.info["cmdline"] or []):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


def write_json(path: Path, document: dict) -> Path:
    """Write ``document`` to ``path`` as JSON (its directory created): a trace or manifest for a test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def render_all(report) -> None:
    """Render ``report`` in every format; its JSON must hold no NaN or Infinity constant."""
    from dlprof.report import FORMATS, renderer
    from dlprof.results.report import Report

    for fmt in FORMATS:
        text = renderer(Report, fmt)(report)
        if fmt == "json":
            json.loads(text, parse_constant=lambda c: pytest.fail(f"JSON constant {c}"))


def assert_chose_the_headline(stderr: str, own: int, chosen: int) -> None:
    """The setting ``--then best`` trained on is the one the headline printed when the trials were done names."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("dlprof: the trials are done: ")]
    changed = re.search(rf"num_workers {own} -> (\d+)", line)
    assert (int(changed.group(1)) if changed else own) == chosen, line


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now (for a launcher's rendezvous, a server under test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_manifests(run_dir: Path) -> list[dict]:
    """The manifest of each of a run's traces (one per rank), by rank."""
    documents = (json.loads(gzip.decompress(path.read_bytes())) for path in trace_files(run_dir))
    return sorted((document["dlprof"] for document in documents), key=lambda m: m["rank"])
