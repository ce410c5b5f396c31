"""Memory sampling from outside the training process: cheap for training, every process read."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from dlprof.capture import memory
from dlprof.capture.memory import MemoryReading, MemorySampler


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


THREADED_CHILD = """
import threading, time
started = time.process_time()
while time.process_time() - started < 0.3:  # CPU time the reading must see
    pass
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(5)]
for thread in threads:
    thread.start()
print("ready", flush=True)
time.sleep(30)
"""


def test_stat_reads_a_processes_threads_and_cpu_time():
    child = subprocess.Popen([sys.executable, "-c", THREADED_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        threads, cpu_s = memory.read_stat(child.pid)
        process = psutil.Process(child.pid)
        times = process.cpu_times()
        assert threads == 6 == process.num_threads()  # the main thread and its pool of 5
        assert 0.3 <= cpu_s <= times.user + times.system + 0.02
    finally:
        child.kill()
        child.wait()
    assert memory.read_stat(child.pid) is None  # gone


def test_stat_parsing_survives_a_command_name_with_spaces_and_parentheses():
    fields = [str(n) for n in range(3, 53)]
    fields[14 - 3], fields[15 - 3], fields[20 - 3] = "250", "50", "7"  # utime, stime (clock ticks), num_threads
    text = ("4242 (a) b (c)) " + " ".join(["S", *fields[1:]])).encode()
    assert memory.parse_stat(text) == (7, 300 / memory._CLOCK_TICKS_PER_S)
    assert memory.parse_stat(b"4242 (cut") is None and memory.parse_stat(b"no name at all") is None


def test_each_reading_has_its_processes_threads_and_cpu_time():
    sampler = MemorySampler(os.getpid(), interval_ms=20)
    sampler.sample_once(psutil.Process(os.getpid()))
    (reading,) = sampler.samples
    assert reading.threads is not None and reading.threads >= threading.active_count()
    assert reading.cpu_s is not None and reading.cpu_s > 0


def reading(time_ms: float, uss_mib: float, threads: int | None = 3, cpu_s: float | None = 1.0) -> MemoryReading:
    mib = int(uss_mib * 2**20)
    return MemoryReading(
        time_ns=10**18 + int(time_ms * 1e6),
        pid=7,
        uss_bytes=mib,
        pss_bytes=mib,
        rss_bytes=2 * mib,
        threads=threads,
        cpu_s=cpu_s,
    )


def test_a_processes_summary_has_its_threads_cpu_time_and_uss_over_time():
    series = [reading(0, 100, threads=3, cpu_s=2.0), reading(500, 150, threads=9, cpu_s=2.5)]
    series.append(reading(1000, 120, threads=None, cpu_s=None))  # unread: /proc/<pid>/stat was gone
    summary = memory.process_memory(7, "worker", 1, series)
    assert (summary.threads_peak, summary.cpu_s) == (9, 0.5)
    assert summary.first_sample_ns == series[0].time_ns
    assert summary.sample_ms == (0.0, 500.0, 1000.0) and summary.uss_mib == (100.0, 150.0, 120.0)
    assert (summary.uss_mib_first, summary.uss_mib_peak, summary.uss_mib_last, summary.duration_s) == (100, 150, 120, 1)
    alone = memory.process_memory(7, "main", None, series[:1])
    assert (alone.threads_peak, alone.cpu_s, alone.sample_ms) == (3, None, (0.0,))  # one reading spans no time
    unread = memory.process_memory(7, "main", None, [reading(0, 1, threads=None, cpu_s=None)] * 2)
    assert (unread.threads_peak, unread.cpu_s) == (None, None)


def test_a_long_series_is_kept_evenly_at_most_max_points():
    count = 5 * memory.MAX_SERIES_POINTS + 3
    summary = memory.process_memory(7, "main", None, [reading(10 * i, i) for i in range(count)])
    assert len(summary.sample_ms) == len(summary.uss_mib) == memory.MAX_SERIES_POINTS
    assert summary.sample_ms[0] == 0 and summary.sample_ms[-1] == 10 * (count - 1)  # the first and the last kept
    gaps = [b - a for a, b in zip(summary.sample_ms, summary.sample_ms[1:], strict=False)]
    assert max(gaps) - min(gaps) <= 10  # evenly: gaps differ by one reading at most
    assert summary.uss_mib_peak == count - 1 and summary.samples == count


@pytest.mark.parametrize(("count", "most", "expected"), [(3, 5, [0, 1, 2]), (5, 3, [0, 2, 4]), (10, 4, [0, 3, 6, 9])])
def test_evenly_spreads_the_kept_points(count, most, expected):
    assert memory.evenly(count, most) == expected


GROWING_CHILD = """
import sys, threading
print("one thread", flush=True)
sys.stdin.readline()
stop = threading.Event()
for _ in range(5):
    threading.Thread(target=stop.wait).start()
print("six threads", flush=True)
stop.wait(30)
"""


def test_threads_started_after_a_processes_reading_are_counted(monkeypatch):
    # A worker is read as it starts; its tokenizer's thread pool comes later, maybe after its last memory reading.
    monkeypatch.setattr(memory, "THREADS_PERIOD_S", 0.0)
    child = subprocess.Popen(
        [sys.executable, "-c", GROWING_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "one thread"
        sampler = MemorySampler(child.pid, interval_ms=20)
        sampler.sample_once(psutil.Process(child.pid))
        assert [s.threads for s in sampler.samples] == [1]
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "six threads"
        sampler.count_threads([child.pid])  # as the sampler does between readings
        samples = sampler.stop()  # folds what was counted since into the last reading
    finally:
        child.kill()
        child.wait()
    assert samples[-1].threads == 6 and max(s.threads or 0 for s in samples) == 6
