"""Summary statistics: percentiles, and the :class:`~dlprof.results.analysis.Summary` of a series of ms."""

from __future__ import annotations

from collections.abc import Sequence

from dlprof.results.analysis import Summary


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100] (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(values_ms: Sequence[float]) -> Summary:
    """Mean, median and 90th percentile of ``values_ms`` (at least one value)."""
    return Summary(sum(values_ms) / len(values_ms), percentile(values_ms, 50), percentile(values_ms, 90))
