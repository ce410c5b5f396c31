"""Faults of the input pipeline beyond the DataLoader's settings (dlprof.advice.findings builds these): each with its
evidence from the run, its fix in one line, and what the fix buys where that can be told."""

from __future__ import annotations

from dataclasses import dataclass

#: What a finding asks of its reader (:attr:`Finding.severity`): a fault that loses samples or crashes training, one
#: that costs speed or memory, or a fact worth knowing that costs little.
SEVERITY_ERROR = "error"
SEVERITY_WARNING = "warning"
SEVERITY_INFO = "info"
SEVERITIES = (SEVERITY_ERROR, SEVERITY_WARNING, SEVERITY_INFO)

#: What :attr:`Finding.gain_pct` rests on: measured in the run's trials, predicted by the throughput model, an upper
#: bound ("up to"), or nothing (no gain in speed can be told; ``gain_pct`` is None).
GAIN_MEASURED = "measured"
GAIN_PREDICTED = "predicted"
GAIN_UP_TO = "up to"
GAIN_NONE = "none"
GAIN_BASES = (GAIN_MEASURED, GAIN_PREDICTED, GAIN_UP_TO, GAIN_NONE)

#: The findings' ids, one per kind of fault (the JSON's ``findings[].id``).
FINDING_PADDING = "padding"
FINDING_PRETOKENIZE = "pretokenize"
FINDING_UNSHARDED_ITERABLE = "unsharded-iterable"
FINDING_FEW_SHARDS = "fewer-shards-than-workers"
FINDING_SHARED_MEMORY = "shared-memory"
FINDING_THREADS = "threads-oversubscribed"
FINDING_COPY_ON_READ = "copy-on-read"
FINDING_PROFILER_AFTER_EFFECT = "profiler-after-effect"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One fault of the input pipeline, found with evidence from the run."""

    #: One of the ``FINDING_*`` ids.
    id: str
    #: One of :data:`SEVERITIES`.
    severity: str
    #: What the run showed, with its numbers (one or two sentences).
    evidence: str
    #: The fix, in one line.
    fix: str
    #: How much faster training gets with the fix, % of the recorded speed; None where no gain in speed can be told
    #: (a fault that loses samples, or memory).
    gain_pct: float | None
    #: One of :data:`GAIN_BASES`: what ``gain_pct`` rests on.
    gain_basis: str
    #: A short title for headings and the headline (``"pad to the longest sequence"``).
    title: str
