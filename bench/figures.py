"""How a number is shown: the median over runs, then each run's own value."""

from __future__ import annotations

import math

from bench.stats import median


def med(runs: list[dict] | None, key: str) -> float:
    return median([r[key] for r in runs or [] if key in r])


def num(value: float, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def cell(runs: list[dict] | None, key: str, digits: int = 1, unit: str = "") -> str:
    """ "median unit [run1, run2, …]" — or "n/a"."""
    values = [r[key] for r in runs or [] if key in r]
    if not values:
        return "n/a"
    each = ", ".join(num(v, digits) for v in values)
    return (
        f"**{num(median(values), digits)}**{unit} [{each}]"
        if len(values) > 1
        else f"**{num(values[0], digits)}**{unit}"
    )


def processes(n: int) -> str:
    return f"{n} worker process" + ("" if n == 1 else "es")


def by_workers(overhead: dict) -> list[tuple[int, list[dict]]]:
    """Scenario 1's throughput runs per number of worker processes, fewest first."""
    found = (overhead or {}).get("throughput") or {}
    return sorted((int(n), runs) for n, runs in found.items() if runs)


def best_workers(overhead: dict) -> tuple[int, list[dict]] | None:
    """Scenario 1's setting with the most agents/s (median over its runs)."""
    settings = [s for s in by_workers(overhead) if not math.isnan(med(s[1], "agents_per_s"))]
    return max(settings, key=lambda s: med(s[1], "agents_per_s")) if settings else None
