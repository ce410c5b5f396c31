"""The profiler's wait/warmup/active schedule, checked before anything starts (no torch import)."""

from __future__ import annotations

from dataclasses import dataclass

from dlprof.errors import UsageError


@dataclass(frozen=True)
class Schedule:
    """``torch.profiler.schedule`` settings, one repeat: skip ``wait`` steps, warm up, record ``active``."""

    wait: int
    warmup: int
    active: int

    def check(self) -> None:
        """Raise UsageError unless the schedule can record a step that excludes start-up."""
        for name in ("wait", "warmup"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name} {getattr(self, name)}: must be >= 0")
        if self.active < 1:
            raise UsageError(f"--active {self.active}: must be >= 1 (the number of steps to record)")
        if self.wait + self.warmup < 1:
            raise UsageError("--wait/--warmup: at least one must be >= 1, or the first recorded step includes start-up")
