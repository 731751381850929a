"""Durations as an operator writes them: a whole number and a unit, `90d`, `12h`, `300s`."""

from __future__ import annotations

import re

from jarvis_agents.errors import ConfigError

UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+)\s*([smhd])")


def duration_s(name: str, raw: str | None) -> float | None:
    """`raw` in seconds; None when unset or blank; a ConfigError naming `name` when it is
    not a positive whole number followed by s, m, h or d."""
    if raw is None or not raw.strip():
        return None
    found = _DURATION.fullmatch(raw.strip().lower())
    if found is None or int(found[1]) == 0:
        raise ConfigError(f"{name} must be a positive duration such as 90d, 12h, 30m or 300s, "
                          f"not {raw!r}")
    return float(int(found[1]) * UNITS_S[found[2]])
