"""What ``dlprof diff`` found (dlprof.workflows.diff builds it): two runs' settings and metrics side by side, and a
verdict. ``None`` means unknown throughout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprof.core.version import DIFF_SCHEMA, __version__
from dlprof.results.report import RunReport

SCHEMA = DIFF_SCHEMA


@dataclass(frozen=True, kw_only=True)
class DiffRun:
    """One side of the comparison."""

    name: str
    trace_file: str
    #: The analysis of this side, for renderers that want more than the rows.
    report: RunReport
    #: A run of several ranks: the rank compared (the slowest, which dlprof analyze reports); None for one rank.
    rank: int | None = None
    #: How many ranks the run has.
    ranks: int = 1


@dataclass(frozen=True, kw_only=True)
class DiffRow:
    """One metric in both runs. ``delta`` is b − a; ``delta_pct`` is that change relative to a.

    ``delta`` is ``None`` when either value is unknown; ``delta_pct`` also when a is 0.
    """

    key: str  # stable machine name: "step_ms", "data_wait_pct", ...
    metric: str  # what a reader sees: "step time, profiled mean (ms)"
    unit: str  # "ms" | "steps/s" | "%" | "MiB"
    a: float | None
    b: float | None
    delta: float | None
    delta_pct: float | None


@dataclass(frozen=True, kw_only=True)
class DiffResult:
    """Two runs compared: the settings that differ, every metric side by side, and the verdict."""

    a: DiffRun
    b: DiffRun
    #: ``{setting: (value in A, value in B)}`` for each setting known in both runs whose values differ.
    settings_changed: dict[str, tuple[Any, Any]]
    #: Settings known in one run only: whether they changed cannot be told (worker-only settings of a
    #: run without workers are not listed: they do not apply there).
    settings_unknown: tuple[str, ...]
    rows: tuple[DiffRow, ...]
    #: How much faster B runs than A, in per cent of A's steps/s (negative: slower); None if unknown.
    speed_change_pct: float | None
    #: What the speed comparison rests on: "unprofiled steps/s" or "profiled step time".
    speed_basis: str
    verdict: str
    schema: str = SCHEMA
    #: The dlprof that made it, stamped beside the schema in every document written.
    dlprof_version: str = __version__
