"""Memory sampling from outside the training process: cheap for training, every process read."""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from dlprof.capture import memory
from dlprof.capture.memory import MemorySampler


def test_every_process_is_read_and_new_ones_first():
    children = [subprocess.Popen(["sleep", "5"]) for _ in range(2)]
    try:
        sampler = MemorySampler(os.getpid(), interval_ms=20)
        sampler.start()
        wanted = {os.getpid(), *(c.pid for c in children)}
        deadline = time.monotonic() + 10  # three readings; generous for a loaded machine
        while time.monotonic() < deadline and not wanted <= {s.pid for s in sampler.samples}:
            time.sleep(0.05)
        samples = sampler.stop()
    finally:
        for child in children:
            child.kill()
            child.wait()
    read = {s.pid for s in samples}
    assert {os.getpid(), *(c.pid for c in children)} <= read
    assert all(s.pss_bytes > 0 and s.rss_bytes >= s.uss_bytes for s in samples)


def test_sampling_backs_off_to_its_duty_limit(monkeypatch):
    # A reading that costs 30 ms may come at most every 30 / MAX_DUTY_FRACTION ms once every process was read.
    def slow_sample(self, root):
        time.sleep(0.03)
        return True, False

    rounds = []

    def counted_sample(self, root):
        rounds.append(0.0)
        return slow_sample(self, root)

    monkeypatch.setattr(MemorySampler, "sample_once", counted_sample)
    monkeypatch.setattr(MemorySampler, "_pids", lambda self, root: [])  # no process appears meanwhile
    sampler = MemorySampler(os.getpid(), interval_ms=100)

    def wait(seconds):  # the time waited after each reading, in the sampler's steps
        rounds[-1] += seconds
        if len(rounds) == 4:
            sampler._stop.set()
        return sampler._stop.is_set()

    monkeypatch.setattr(sampler._stop, "wait", wait)
    sampler._run()
    waits = rounds[:3]
    assert len(waits) == 3 and all(w >= 0.03 / memory.MAX_DUTY_FRACTION * 0.95 for w in waits)


def test_a_new_process_ends_the_wait_between_readings(monkeypatch):
    sampler = MemorySampler(os.getpid(), interval_ms=100)
    listed = [[os.getpid()], [os.getpid()], [os.getpid(), 12345]]  # a worker starts during the third interval
    monkeypatch.setattr(MemorySampler, "_pids", lambda self, root: listed.pop(0) if listed else [os.getpid()])
    sampler._last_sampled[os.getpid()] = 1.0
    waited = []
    monkeypatch.setattr(sampler._stop, "wait", lambda seconds: waited.append(seconds) or False)
    sampler._pause(psutil.Process(os.getpid()), 6.0)
    assert waited == pytest.approx([0.1, 0.1, 0.1])  # not the 6 s a 30 ms reading would wait


def test_descendants_are_every_process_below_as_psutil_sees_them():
    shell = subprocess.Popen(["sh", "-c", "sleep 5 & sleep 5 & wait"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(psutil.Process(shell.pid).children()) < 2:
            time.sleep(0.02)
        found = memory.descendants(os.getpid())
        assert found is not None and len(found) == len(set(found))
        assert {shell.pid, *(p.pid for p in psutil.Process(shell.pid).children())} <= set(found)
        assert sorted(memory.descendants(shell.pid)) == sorted(p.pid for p in psutil.Process(shell.pid).children())
    finally:
        shell.kill()
        shell.wait()
    assert memory.descendants(shell.pid) == []  # reaped: no process, no children


def test_without_the_kernels_list_the_sampler_asks_psutil(monkeypatch):
    monkeypatch.setattr(memory, "descendants", lambda pid: None)
    child = subprocess.Popen(["sleep", "5"])
    try:
        sampler = MemorySampler(os.getpid(), interval_ms=20)
        for _ in range(len(psutil.Process(os.getpid()).children(recursive=True)) + 1):  # one process per round
            sampler.sample_once(psutil.Process(os.getpid()))
        assert {os.getpid(), child.pid} <= {s.pid for s in sampler.samples}
    finally:
        child.kill()
        child.wait()
