"""The soak's verdicts: does what a long run piles up on the node level off, and does the agent's RSS grow?

Pure: the sampled series in (lists of numbers, as the JSON carries them), plain dicts out, so
`python -m bench report FILE.json` recomputes the same verdicts from the raw samples.

A series *levels off* when the highest value over the last third of the run is no higher than the highest
over the middle third, within a tolerance: what grows with every cycle (log directories, dead containers or
sandboxes nobody removes) keeps climbing into the last third, while what a garbage collector trims saws up
and down below the same ceiling. The first third is the ramp from an empty node and is not compared.
The agent's RSS is judged on medians (first third against last third): a single spike is not growth.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

# The series sampled during the soak, in the order the report shows them: key → what it is.
SERIES: dict[str, str] = {
    "pod_log_bytes": "bytes under /var/log/pods",
    "container_log_links": "entries in /var/log/containers",
    "image_fs_bytes": "image filesystem used (CRI ImageFsInfo)",
    "containers": "containers the runtime holds",
    "exited_containers": "exited containers the runtime holds",
    "sandboxes": "pod sandboxes the runtime holds",
}
RSS = "rss_bytes"

# Fewer samples than this and a third holds too little to judge.
MIN_SAMPLES = 6
# Relative slack every series gets; the absolute slack is one wave of pods' worth (see `tolerances`).
REL_TOL = 0.10
RSS_REL_TOL = 0.10
RSS_ABS_TOL = 4 * 2**20
# Upstream's container GC runs once a minute: thirds shorter than that cannot show it trimming.
GC_PERIOD_SECONDS = 60.0


def thirds(values: Sequence[Any]) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]]:
    """First, middle and last third by sample index (the last third takes the remainder)."""
    n = len(values)
    a, b = n // 3, 2 * n // 3
    return values[:a], values[a:b], values[b:]


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def levels_off(values: Sequence[float | None], rel_tol: float = REL_TOL, abs_tol: float = 0.0) -> dict[str, Any]:
    """Verdict on one series: ``levels_off`` is True when max(last third) <= max(middle third) * (1 + rel_tol)
    + abs_tol, False when above, None (with a reason) when there are too few samples. Missing samples (None:
    the source could not be read then) are dropped first."""
    present = _present(values)
    if len(present) < MIN_SAMPLES:
        return {"levels_off": None, "reason": f"{len(present)} samples (need {MIN_SAMPLES})"}
    _, middle, last = thirds(present)
    middle_max, last_max = max(middle), max(last)
    limit = middle_max * (1 + rel_tol) + abs_tol
    return {"levels_off": last_max <= limit, "middle_max": middle_max, "last_max": last_max,
            "limit": round(limit, 1), "peak": max(present)}


def rss_growth(values: Sequence[float | None], rel_tol: float = RSS_REL_TOL,
               abs_tol: float = RSS_ABS_TOL) -> dict[str, Any]:
    """The agent's RSS, median of the last third against the first: ``grows`` is True when the last is above
    first * (1 + rel_tol) + abs_tol, None with too few samples. Sizes in bytes; ``growth_percent`` relative."""
    present = _present(values)
    if len(present) < MIN_SAMPLES:
        return {"grows": None, "reason": f"{len(present)} samples (need {MIN_SAMPLES})"}
    first, _, last = thirds(present)
    first_median, last_median = statistics.median(first), statistics.median(last)
    growth = last_median - first_median
    return {"grows": last_median > first_median * (1 + rel_tol) + abs_tol,
            "first_median": first_median, "last_median": last_median, "growth": growth,
            "growth_percent": round(100 * growth / first_median, 1) if first_median else None,
            "peak": max(present)}


def tolerances(parallel: int, pod_log_bytes: int, containers_per_pod: int) -> dict[str, tuple[float, float]]:
    """(relative, absolute) slack per series: one wave of pods (`parallel` at once) may be alive, or just
    finished and not yet collected, at any sample, so the last third may hold that much more than the middle
    one's peak without anything leaking."""
    return {
        "pod_log_bytes": (REL_TOL, float(parallel * pod_log_bytes)),
        "container_log_links": (REL_TOL, float(parallel * containers_per_pod)),
        "image_fs_bytes": (REL_TOL, 0.0),
        "containers": (REL_TOL, float(parallel * containers_per_pod)),
        "exited_containers": (REL_TOL, float(parallel * containers_per_pod)),
        "sandboxes": (REL_TOL, float(parallel)),
    }


def summarize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The soak's raw results (bench.run's ``soak``) → verdicts per series, the RSS growth, and whether all
    series level off (None when some could not be judged and none failed)."""
    series: Mapping[str, Sequence[float | None]] = raw.get("series", {})
    tol: Mapping[str, Sequence[float]] = raw.get("tolerances", {})
    times = [t for t in series.get("t", []) if t is not None]
    third_seconds = round((times[-1] - times[0]) / 3, 1) if len(times) >= 2 else 0.0
    verdicts = {}
    for key in SERIES:
        if key in series:
            rel, abs_ = tol.get(key, (REL_TOL, 0.0))
            verdicts[key] = levels_off(series[key], rel, abs_)
    judged = [v["levels_off"] for v in verdicts.values()]
    all_level = False if False in judged else (None if None in judged or not judged else True)
    return {
        "images": list(raw.get("images", [])),
        "cycles": raw.get("cycles", 0), "completed": raw.get("completed", 0), "parallel": raw.get("parallel", 0),
        "seconds": raw.get("seconds", 0.0), "failures": len(raw.get("failures", [])),
        "restarts": raw.get("restarts", 0), "samples": len(times), "third_seconds": third_seconds,
        "shorter_than_gc_period": third_seconds < GC_PERIOD_SECONDS,
        "verdicts": verdicts, "all_level_off": all_level, "rss": rss_growth(series.get(RSS, [])),
        "before": raw.get("before", {}), "after": raw.get("after", {}), "leftovers": raw.get("leftovers"),
        "cpu_seconds": raw.get("cpu_seconds"),
    }
