"""What a recording says of its machine: /dev/shm's size and free space, torch's sharing strategy and the thread
settings of the training's environment."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest
import torch
from conftest import SMALL_WORKLOAD, check_recorded_traces, trace_files

from dlprof.capture import facts, memory
from dlprof.core.manifest import parse_manifest

REPO = Path(__file__).resolve().parents[2]
SMALL_SHM_BYTES = 8 * 2**20


def test_shm_space_is_the_filesystems_size_and_free_bytes(tmp_path):
    stat = os.statvfs(tmp_path)
    total, free = facts.shm_space(str(tmp_path))
    assert total == stat.f_blocks * stat.f_frsize > 0
    assert 0 <= free <= total
    assert facts.shm_space(str(tmp_path / "missing")) is None


def test_host_facts_carry_shm_as_read_when_the_recording_began(monkeypatch, tmp_path):
    monkeypatch.setattr(facts, "SHM_PATH", str(tmp_path))
    shm = facts.shm_space()
    assert shm is not None and shm[0] == os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize
    host = facts.host_facts(shm)
    assert (host.shm_total_bytes, host.shm_free_bytes) == shm
    monkeypatch.setattr(facts, "SHM_PATH", str(tmp_path / "missing"))  # no /dev/shm: unknown, not a failure
    host = facts.host_facts(facts.shm_space())
    assert (host.shm_total_bytes, host.shm_free_bytes) == (None, None)


def test_thread_settings_are_the_environments_as_set(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    host = facts.host_facts()
    assert (host.tokenizers_parallelism, host.omp_num_threads, host.mkl_num_threads) == ("true", "1", None)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    host = facts.host_facts()
    assert (host.tokenizers_parallelism, host.mkl_num_threads) == (None, "4")


def test_sharing_strategy_is_the_processes_own():
    before = torch.multiprocessing.get_sharing_strategy()
    assert facts.host_facts().sharing_strategy == before
    try:
        torch.multiprocessing.set_sharing_strategy("file_system")
        assert facts.host_facts().sharing_strategy == "file_system"
    finally:
        torch.multiprocessing.set_sharing_strategy(before)


def _small_shm_allowed() -> bool:
    """Whether this machine lets a test mount its own /dev/shm in a mount namespace of its own (root, no seccomp)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
def test_a_recording_with_a_small_dev_shm_says_how_small(tmp_path):
    if not _small_shm_allowed():
        pytest.skip("cannot mount a tmpfs on /dev/shm in a mount namespace here (needs root and unshare)")
    out = tmp_path / "traces"
    record = [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", "small-shm"]
    record += [*SMALL_WORKLOAD, "--num-workers", "1", "--steps", "20"]  # a loaded machine's steps may never settle
    # unshare makes the mount private to the namespace: the machine's own /dev/shm is untouched.
    script = f"mount -t tmpfs -o size={SMALL_SHM_BYTES} tmpfs /dev/shm && exec {shlex.join(record)}"
    command = ["unshare", "-m", "sh", "-c", script]
    with subprocess.Popen(command, cwd=REPO, stdout=PIPE, stderr=PIPE, text=True, start_new_session=True) as child:
        try:
            stdout, stderr = child.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the training process too: none may outlive the test
            stdout, stderr = child.communicate()
    assert child.returncode == 0, f"dlprof record failed:\n{stdout}\n{stderr}"
    check_recorded_traces(out)
    (trace,) = trace_files(out / "small-shm")
    with gzip.open(trace, "rt") as f:
        manifest, problems = parse_manifest(json.load(f)["dlprof"])
    assert problems == ()
    host = manifest.host
    assert host.shm_total_bytes == SMALL_SHM_BYTES
    assert host.shm_free_bytes is not None and 0 < host.shm_free_bytes <= SMALL_SHM_BYTES
    assert host.sharing_strategy == torch.multiprocessing.get_sharing_strategy()
    # The built-in workload sets it, unless set already, before its workers tokenize.
    assert host.tokenizers_parallelism == os.environ.get("TOKENIZERS_PARALLELISM", "false")
    roles = {p.role for p in manifest.memory.processes}
    assert roles == {"main", "worker"}
    for process in manifest.memory.processes:
        assert process.threads_peak is not None and process.threads_peak >= 1
        assert len(process.sample_ms) == len(process.uss_mib) == min(process.samples, memory.MAX_SERIES_POINTS)
