"""The ``torch.profiler`` lifecycle inside the training process: schedule, step, export, run facts.

One profiler step per training step: after each ``optimizer.step()`` of the first optimizer that
steps (a global post-hook, so no code change), or, for a script that never steps an optimizer (for
example inference), after each batch a DataLoader returns.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from dlprof import __version__
from dlprof.capture import loader_probe, spanfile
from dlprof.capture.calibrate import measure_handoff
from dlprof.capture.schedule import Schedule

#: Batches returned with no optimizer step in between before the profiler steps per batch instead:
#: a few, so that gradient accumulation over a handful of micro-batches is not mistaken for
#: a script without an optimizer.
BATCHES_BEFORE_BATCH_STEPPING = 16


def host_facts() -> dict:
    """Usable cores, memory and GPU of this machine, as the training process sees them."""
    import psutil

    memory = psutil.virtual_memory()
    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        gpu = {
            "name": props.name,
            "count": torch.cuda.device_count(),
            "memory_mib": props.total_memory // 2**20,
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
        }
    return {
        "hostname": socket.gethostname(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "ram_total_mib": memory.total // 2**20,
        "ram_available_mib": memory.available // 2**20,
        "gpu": gpu,
        # Intra-op threads: on a CPU device, training itself uses this many cores.
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }


def versions() -> dict:
    """Versions of the stack that shaped the trace; packages the script never imported are left out."""
    found = {"dlprof": __version__, "python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "peft", "tokenizers", "accelerate"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "unknown")
    return found


class Recorder:
    """Runs ``torch.profiler`` over the training steps of this process and exports the trace."""

    def __init__(self, schedule: Schedule, session_dir: Path, rank: int = 0):
        self.schedule = schedule
        self.session_dir = session_dir
        self.rank = rank
        self.trace_path = session_dir / f"kineto-rank{rank}.json"
        self.steps = 0
        self.step_mode: str | None = None
        self.window_start_ns: int | None = None
        self.step_clock: list[tuple[int, int, int]] = []
        # Run-queue wait of the training thread: time it was ready to run but the cores were busy
        # (with DataLoader workers, say), which stretches the step without being the step's own work.
        self._main_runq_ns = spanfile.run_queue_clock()
        self.exported = False
        self._optimizer_id: int | None = None
        self._batches_since_step = 0
        self._hook: Any = None
        self._profiler: torch.profiler.profile | None = None

    def start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=self.schedule.wait, warmup=self.schedule.warmup, active=self.schedule.active, repeat=1
            ),
            on_trace_ready=self._export,
        )
        self._profiler.start()
        self._hook = register_optimizer_step_post_hook(self._after_optimizer_step)
        loader_probe.add_batch_callback(self._after_batch)

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.step_mode == "batch":
            return
        if self._optimizer_id is None:
            self._optimizer_id = id(optimizer)
            self.step_mode = "optimizer"
        if id(optimizer) == self._optimizer_id:
            self._step()

    def _after_batch(self) -> None:
        self._batches_since_step += 1
        if self.step_mode == "batch":
            self._step()
        elif self.step_mode is None and self._batches_since_step > BATCHES_BEFORE_BATCH_STEPPING:
            self.step_mode = "batch"
            self._step()

    def _step(self) -> None:
        self._batches_since_step = 0
        self.steps += 1
        # The main process's CPU time (all its threads) at each step boundary inside the profiled
        # window: what training itself demands of the cores, which no trace event tells.
        reading = (time.time_ns(), time.process_time_ns(), self._main_runq_ns())
        window_was_open = self.window_start_ns is not None and not self.exported
        profiler = self._profiler
        profiler.step()
        if self.window_start_ns is None and profiler.current_action != torch.profiler.ProfilerAction.NONE:
            # Batches for the first recorded steps are produced from here on (prefetching).
            self.window_start_ns = reading[0]
            window_was_open = True
        if window_was_open:
            self.step_clock.append(reading)

    def _export(self, profiler: torch.profiler.profile) -> None:
        tmp = self.trace_path.with_suffix(".tmp")
        profiler.export_chrome_trace(str(tmp))
        os.replace(tmp, self.trace_path)
        self.exported = True

    def finish(self, status: str, error: str | None) -> dict:
        """Stop profiling (exporting what was recorded) and write this process's facts for the merge."""
        if self._hook is not None:
            self._hook.remove()
        if self._profiler is not None:
            self._profiler.stop()  # mid-window (a failure, a short script): exports the steps so far
        loader_probe.flush()
        loaders = loader_probe.loader_records()
        loader_probe.uninstall()  # the calibration's own DataLoader must not be recorded
        result = {
            "status": status,
            "error": error,
            "rank": self.rank,
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "pid": os.getpid(),
            "trace_file": self.trace_path.name if self.exported else None,
            "steps_run": self.steps,
            "step_mode": self.step_mode,
            "schedule": asdict(self.schedule),
            "window_start_ns": self.window_start_ns,
            "step_clock": self.step_clock,
            "finished_ns": time.time_ns(),
            "loaders": [{"id": r.loader_id, "iterations": r.iterations, "batches": r.batches, **r.config} for r in loaders],
            # Calibrate only after a run that completed: a failing process should exit promptly.
            "host": {**host_facts(), "handoff": measure_handoff() if self.exported and loaders and status == "complete" else None},
            "versions": versions(),
        }
        path = self.session_dir / f"result-rank{self.rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, path)
        return result
