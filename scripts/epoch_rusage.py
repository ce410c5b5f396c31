"""The training process's own figures where each epoch starts, for scripts/measure_process_cpu.py: run a module as
``python -m`` would, read ``getrusage`` of this process (all its threads) and of its reaped children (the DataLoader
workers of the epochs before) at each ``DataLoader.__iter__``, and write the training loader's readings as JSON at exit.

    python scripts/epoch_rusage.py OUT.json -m MODULE [ARGS...]

The standard library and torch only: it runs inside the training it measures, plain or under ``dlprof record``.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import sys
import time
from pathlib import Path

#: Python's garbage collections in the training process: their time (s) and how many were full (generation 2).
_GC = {"s": 0.0, "full": 0, "started": 0.0}


def _gc_callback(phase: str, info: dict) -> None:
    if phase == "start":
        _GC["started"] = time.perf_counter()
        return
    _GC["s"] += time.perf_counter() - _GC["started"]
    _GC["full"] += info.get("generation") == 2


def _reading() -> dict[str, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": time.monotonic(),
        "main_user_s": own.ru_utime,
        "main_sys_s": own.ru_stime,
        "main_minflt": own.ru_minflt,
        "main_nvcsw": own.ru_nvcsw,
        "main_nivcsw": own.ru_nivcsw,
        "workers_cpu_s": children.ru_utime + children.ru_stime,
        "gc_s": _GC["s"],
        "gc_full": _GC["full"],
        "main_rss_mib": int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20,
    }


def main(out: str, module_argv: list[str]) -> None:
    """Run ``python -m MODULE ARGS`` in this process, a reading at each ``DataLoader.__iter__``, kept by loader: the
    training's loader is the one iterated most (dlprof's calibration, after the training, makes loaders of its own)."""
    import atexit
    import gc

    from torch.utils.data import DataLoader

    gc.callbacks.append(_gc_callback)

    readings: dict[int, list[dict[str, float]]] = {}
    original = DataLoader.__iter__

    def __iter__(self):
        readings.setdefault(id(self), []).append(_reading())
        return original(self)

    DataLoader.__iter__ = __iter__  # type: ignore[method-assign]

    def dump() -> None:
        Path(out).write_text(json.dumps(max(readings.values(), key=len, default=[])))

    atexit.register(dump)
    sys.argv = module_argv[1:]
    runpy.run_module(module_argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit("usage: python scripts/epoch_rusage.py OUT.json -m MODULE [ARGS...]")
    main(sys.argv[1], sys.argv[2:])
