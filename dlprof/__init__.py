"""dlprof: is my GPU waiting for data, and which DataLoader settings fix it?

`dlprof record` runs training steps under ``torch.profiler`` and also records what happens inside the
DataLoader worker processes (dataset fetch, tokenizer calls, ``collate_fn``) on the same clock.
``dlprof.analyze(path)`` is the library entry point of `dlprof analyze`; in a notebook, its report gives its tables as
pandas DataFrames (``report.steps``, ``.batches``, ``.predictions``, ``.trials``, ``.ranks``) and shows itself.
"""

from __future__ import annotations

import typing

from dlprof.core.version import __version__

__all__ = ["__version__", "analyze"]

if typing.TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from dlprof.notebook import NotebookReport


def analyze(path: str | Path | Sequence[str | Path]) -> NotebookReport:
    """Analyse a run directory, a trace file, or a directory of runs; the Report every renderer takes, with its tables
    as DataFrames (:class:`dlprof.notebook.NotebookReport`). A list of run directories is the ones the nodes of one
    job wrote each on their own, analysed as one run.

    Raises:
        dlprof.core.errors.DlprofError: the path holds no readable trace (the message says why and what to do).
    """
    from pathlib import Path

    from dlprof.notebook import NotebookReport
    from dlprof.workflows.analyze import build_report

    return NotebookReport.of(build_report(Path(path) if isinstance(path, (str, Path)) else [Path(p) for p in path]))
