"""Numbers as the renderers write them, with one policy for what is not a number.

``None`` means unknown throughout dlprof's results. A NaN or an infinity should never reach a result
(trace/ validates at the boundary), but if one does it is written as unknown too: ``null`` in JSON
(which has no NaN), ``unknown`` or ``-`` in text, never ``nan``.
"""

from __future__ import annotations

import math

UNKNOWN = "unknown"
#: A cell with nothing to show: no change, no rate, no prediction.
NOT_APPLICABLE = "-"


def finite(value: float | None) -> float | None:
    """``value``, or None for unknown (None, NaN, infinity)."""
    return value if value is not None and math.isfinite(value) else None


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A number for a JSON document: rounded to ``digits``; None (``null``) for unknown."""
    known = finite(value)
    return None if known is None else round(known, digits)


def fixed(value: float | None, spec: str = ".2f", unknown: str = UNKNOWN) -> str:
    """A number for text, in the format ``spec``; ``unknown`` for unknown."""
    return unknown if finite(value) is None else format(value, spec)


def ms(value: float | None) -> str:
    """Milliseconds with two decimals; "unknown" when unknown."""
    return fixed(value)


def per_s(step_ms: float) -> str:
    """Steps (or batches) per second from ms each; "-" when nothing measurable."""
    return f"{1000 / step_ms:.2f}" if finite(step_ms) is not None and step_ms > 0 else NOT_APPLICABLE


def rate(value: float | None) -> str:
    """A rate per second measured elsewhere; "-" when unknown."""
    return fixed(value, ".1f", NOT_APPLICABLE)


def pct(part: float, whole: float) -> str:
    """``part`` in per cent of ``whole``; "-" when ``whole`` is 0 or unknown."""
    return fixed(100 * part / whole, ".1f", NOT_APPLICABLE) if whole and finite(whole) is not None else NOT_APPLICABLE


def gain(value: float | None) -> str:
    """A gain or share in per cent, as the headline writes it: "31", or "9.5" under 10; "unknown" when unknown."""
    known = finite(value)
    if known is None:
        return UNKNOWN
    return f"{known:.0f}" if abs(known) >= 10 else f"{known:.1f}"
