"""Arithmetic on sets of time intervals ``[(start, end), ...]`` in µs."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

Intervals = list[tuple[float, float]]


def union(intervals: Iterable[tuple[float, float]]) -> Intervals:
    """Sorted, non-overlapping union (touching intervals merge)."""
    merged: Intervals = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def clip(intervals: Intervals, lo: float, hi: float) -> Intervals:
    """The parts of a union inside ``[lo, hi]``."""
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b``; both are unions."""
    result: Intervals = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                result.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            result.append((cursor, end))
    return result


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """``a`` ∩ ``b``; both are unions."""
    result: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            result.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return result


def total(intervals: Intervals) -> float:
    return sum(e - s for s, e in intervals)


class Timeline:
    """A union of intervals with fast clipping to a window (bisect on the sorted starts)."""

    def __init__(self, intervals: Iterable[tuple[float, float]]):
        self.intervals = union(intervals)
        self._starts = [s for s, _ in self.intervals]
        self._ends = [e for _, e in self.intervals]

    def clip(self, lo: float, hi: float) -> Intervals:
        # Only the intervals that can overlap [lo, hi]: slicing to the end instead made clipping every
        # step of a trace quadratic in its length.
        i = bisect.bisect_right(self._ends, lo)
        j = bisect.bisect_left(self._starts, hi, lo=i)
        return [(max(start, lo), min(end, hi)) for start, end in self.intervals[i:j]]
