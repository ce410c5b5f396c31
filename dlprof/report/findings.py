"""A run's findings in words, as every report prints them: its severity, title and gain on one line, then its evidence
and its fix (numbers are written by report/format.py)."""

from __future__ import annotations

from dlprof.report.format import finite, gain
from dlprof.results.findings import GAIN_MEASURED, GAIN_PREDICTED, GAIN_UP_TO, Finding

#: The heading of a run's findings (faults of the input pipeline beyond the DataLoader's settings).
FINDINGS_HEADING = "Findings (the largest gain first)"


def finding_gain(finding: Finding) -> str | None:
    """What a finding's fix buys, in words: "up to 31 % faster", "12 % faster (predicted)", "measured 9.0 % faster";
    None when no gain in speed can be told."""
    value = finite(finding.gain_pct)
    if value is None:
        return None
    faster = f"{gain(abs(value))} % {'faster' if value >= 0 else 'slower'}"
    if finding.gain_basis == GAIN_UP_TO:
        return f"up to {faster}"
    if finding.gain_basis == GAIN_PREDICTED:
        return f"{faster} (predicted)"
    if finding.gain_basis == GAIN_MEASURED:
        return f"measured {faster}"
    return faster


def finding_title(finding: Finding) -> str:
    """A finding's first line: its severity, its title and what its fix buys (``[warning] pad to the longest
    sequence: up to 31 % faster``)."""
    bought = finding_gain(finding)
    return f"[{finding.severity}] {finding.title}" + (f": {bought}" if bought else "")


def finding_fix(finding: Finding) -> str:
    return f"fix: {finding.fix}"
