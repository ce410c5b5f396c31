"""What ``dlprof.analyze`` returns: the :class:`~dlprof.results.report.Report`, with its tables as pandas DataFrames
and its HTML report shown in Jupyter.

Here, on the top floor, because results/ may import only the bottom floor: the frames are built by
:mod:`dlprof.report.frames`, which imports pandas only when a frame is asked for.
"""

from __future__ import annotations

import dataclasses
import typing

from dlprof.report import frames
from dlprof.results.report import Report

if typing.TYPE_CHECKING:
    import pandas as pd


@dataclasses.dataclass(frozen=True, eq=False)
class NotebookReport(Report):
    """A :class:`Report` (every renderer takes it) that also gives its tables as DataFrames, one row per step, batch,
    prediction, trial segment, rank and finding, every run's in one frame with a ``run`` column
    (:mod:`dlprof.report.frames` says what each column holds). Each property builds a new frame."""

    @classmethod
    def of(cls, report: Report) -> NotebookReport:
        return cls(**{f.name: getattr(report, f.name) for f in dataclasses.fields(Report)})

    def __eq__(self, other: object) -> bool:
        """Equal to any Report of the same contents: the frames are views of it, not data of their own."""
        if not isinstance(other, Report):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(Report))

    __hash__ = Report.__hash__

    @property
    def steps(self) -> pd.DataFrame:
        """Every profiled step: ``step_ms`` and each category's ms."""
        return frames.steps(self)

    @property
    def batches(self) -> pd.DataFrame:
        """Every batch: its worker, its wall, CPU and each stage's ms."""
        return frames.batches(self)

    @property
    def predictions(self) -> pd.DataFrame:
        """Every num_workers predicted, the recommended one marked."""
        return frames.predictions(self)

    @property
    def trials(self) -> pd.DataFrame:
        """Every segment of the in-process trials, with its own speed."""
        return frames.trials(self)

    @property
    def ranks(self) -> pd.DataFrame:
        """Every rank of a run of several ranks."""
        return frames.ranks(self)

    @property
    def findings(self) -> pd.DataFrame:
        """Every finding (a fault of the input pipeline beyond the DataLoader's settings), its gain and fix."""
        return frames.findings(self)

    def _repr_html_(self) -> str:
        """Jupyter shows the HTML report."""
        return frames.html_body(self)
