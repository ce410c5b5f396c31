"""Summary statistics with units in the field names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100] (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Summary:
    """Mean, median and 90th percentile of a per-step (or per-batch) quantity, in ms."""

    mean_ms: float
    p50_ms: float
    p90_ms: float

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> Summary:
        return cls(sum(values_ms) / len(values_ms), percentile(values_ms, 50), percentile(values_ms, 90))
