"""Percentiles and medians, with no dependency beyond the standard library."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), interpolated linearly between ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 and max in milliseconds, and the sample count."""
    return {
        "n": len(seconds),
        "p50_ms": percentile(seconds, 50) * 1000,
        "p90_ms": percentile(seconds, 90) * 1000,
        "p99_ms": percentile(seconds, 99) * 1000,
        "max_ms": max(seconds) * 1000 if seconds else math.nan,
    }


def median(values: Sequence[float]) -> float:
    clean = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def median_of_runs(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Key by key, the median over runs of each number (the runs share their keys)."""
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))] if runs else []
    return {k: median([r[k] for r in runs if k in r]) for k in keys}
