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
