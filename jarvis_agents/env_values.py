"""Settings' values as an operator writes them in the environment: whole numbers, seconds,
lists of seconds and flags, each a ConfigError naming its variable when it is not one."""

from __future__ import annotations

import math
from collections.abc import Mapping

from jarvis_agents.errors import ConfigError


def whole_number(env: Mapping[str, str], name: str, default: int, *, low: int = 0, high: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, not {raw!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{name} must be {bounds}, not {value}")
    return value


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number of seconds, not {raw!r}")
    return value


def seconds_list(env: Mapping[str, str], name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        values = tuple(float(part) for part in raw.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError(
            f"{name} must be positive numbers of seconds separated by commas, not {raw!r}")
    return values


def flag(env: Mapping[str, str], name: str, default: bool | None) -> bool | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be 1/0, true/false or yes/no, not {raw!r}")
