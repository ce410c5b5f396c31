"""The workers' memory of each segment of the in-process trials, and of each setting tried: the memory sampler's
reading (PSS, from outside) of the workers each switch started (``TrialSegment.worker_pids``)."""

from __future__ import annotations

from dlprof.core.manifest import Manifest, TrialSegment


def segment_pss(manifest: Manifest, segment: TrialSegment) -> float | None:
    """A segment's workers' memory together (PSS, MiB): each worker's peak, summed over the workers its switch started;
    0 without workers; None where one of them was not sampled."""
    if segment.num_workers == 0:
        return 0.0
    peaks = {p.pid: p.pss_mib_peak for p in manifest.memory.processes}
    found = [peak for pid in segment.worker_pids if (peak := peaks.get(pid)) is not None]
    return sum(found) if segment.worker_pids and len(found) == len(segment.worker_pids) else None


def workers_pss(manifest: Manifest, segments: list[TrialSegment]) -> float | None:
    """The most a setting's workers took together over its segments (:func:`segment_pss`); None where unknown."""
    known = [pss for s in segments if (pss := segment_pss(manifest, s)) is not None]
    return max(known) if known else None
