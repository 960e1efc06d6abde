"""Summaries of latency samples: the percentiles the results and the plot report, and ratios between runs.

Pure: lists of seconds in, plain dicts out, so the JSON results carry the same numbers the tables show.
Percentiles use the nearest-rank method (the sample at rank ceil(p/100 * n)), as upstream's node e2e
density tests report them: every reported figure is a latency that was actually observed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

PERCENTILES: tuple[int, ...] = (50, 90, 99)


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile; p in (0, 100]."""
    if not samples:
        raise ValueError("no samples")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} outside (0, 100]")
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(samples: Sequence[float]) -> dict[str, float | int]:
    """n, p50, p90, p99, max and mean of a sample set (an empty set gives just n=0)."""
    if not samples:
        return {"n": 0}
    out: dict[str, float | int] = {"n": len(samples)}
    for p in PERCENTILES:
        out[f"p{p}"] = round(percentile(samples, p), 4)
    out["max"] = round(max(samples), 4)
    out["mean"] = round(sum(samples) / len(samples), 4)
    return out


def ratios(subject: Mapping[str, float | int], reference: Mapping[str, float | int]) -> dict[str, float]:
    """subject / reference for each percentile both summaries have (how many times slower the subject is)."""
    out: dict[str, float] = {}
    for key in (*(f"p{p}" for p in PERCENTILES), "max"):
        a, b = subject.get(key), reference.get(key)
        if isinstance(a, int | float) and isinstance(b, int | float) and b > 0:
            out[key] = round(a / b, 2)
    return out
