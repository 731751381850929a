"""The `getTime` tool: the current time in an IANA zone or a well-known city, offline.

Places resolve in this order: an IANA zone name (case-insensitive), a city or alias
from the bundled `cities.json`, then the city part of any IANA zone ("Kolkata" →
Asia/Kolkata). Only zone keys from `zoneinfo.available_timezones()` are ever
opened, so the model's text never becomes a file path.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from zoneinfo import ZoneInfo, available_timezones

from jarvis_agents.errors import ToolError
from jarvis_agents.tools.base import ToolContext

Clock = Callable[[], datetime]

# Models often phrase the input as a question; these words carry no place.
_QUESTION = re.compile(
    r"^(?:what(?:'s| is)\s+)?(?:the\s+)?(?:current\s+)?(?:local\s+)?"
    r"(?:time|date)\s+(?:in|at|for)\s+",
    re.IGNORECASE,
)


def utc_now() -> datetime:
    """The default clock: an aware datetime in UTC."""
    return datetime.now(UTC)


def normalise_place(text: str) -> str:
    """Lowercase, without accents or punctuation: "São Paulo" → "sao paulo"."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return re.sub(r"[^a-z0-9]+", " ", plain.lower().replace("'", "")).strip()


@cache
def city_table() -> dict[str, tuple[str, str]]:
    """normalised city or alias → (display name, IANA zone), from cities.json."""
    raw = json.loads(
        resources.files("jarvis_agents.tools.builtin").joinpath("cities.json").read_text("utf-8")
    )
    cities: dict[str, str] = raw["cities"]
    table = {normalise_place(name): (name, zone) for name, zone in cities.items()}
    for alias, city in raw["aliases"].items():
        table[normalise_place(alias)] = (city, cities[city])
    return table


@cache
def _zones_by_lower_key() -> dict[str, str]:
    return {key.lower(): key for key in available_timezones()}


@cache
def _zones_by_city_part() -> dict[str, str]:
    # "America/Argentina/Buenos_Aires" → "buenos aires"; only region/city zones, so
    # legacy aliases like "US/Eastern" or "EST" do not shadow real cities.
    regions = (
        "Africa/",
        "America/",
        "Antarctica/",
        "Asia/",
        "Atlantic/",
        "Australia/",
        "Europe/",
        "Indian/",
        "Pacific/",
    )
    keys = sorted(k for k in available_timezones() if k.startswith(regions))
    return {normalise_place(k.rsplit("/", 1)[1].replace("_", " ")): k for k in keys}


def resolve_place(place: str) -> tuple[str, str]:
    """(display name, IANA zone key) for a place; ToolError when it is unknown."""
    text = _QUESTION.sub("", place.strip().strip("`'\"").strip()).rstrip("?. ").strip()
    if not text:
        return "UTC", "UTC"
    if (key := _zones_by_lower_key().get(text.lower())) is not None:
        return key, key
    cities = city_table()
    by_city_part = _zones_by_city_part()
    # Try the whole text first, then the part before a comma ("Tokyo, Japan").
    for candidate in dict.fromkeys([text, text.split(",")[0]]):
        norm = normalise_place(candidate)
        if norm in cities:
            return cities[norm]
        if norm in by_city_part:
            key = by_city_part[norm]
            return candidate.strip(), key
    raise ToolError(
        f"Unknown place {place.strip()[:80]!r}. Give a major city (e.g. Tokyo, New York) "
        "or an IANA time zone name such as Europe/London or America/New_York."
    )


def format_offset(offset: timedelta | None) -> str:
    """UTC+09:00, UTC-03:30, UTC+00:00."""
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{mins:02d}"


class GetTimeTool:
    """Tells the current local time of a city or an IANA time zone."""

    name = "getTime"
    description = (
        "Get the current date and time in a city or time zone, e.g. Tokyo, New York, "
        "São Paulo or an IANA name like Europe/London. Works offline."
    )
    input_hint = "a city name or an IANA time zone, e.g. Tokyo or Europe/London"
    input_parameter = "place"  # its schema: {"place": string}, required
    # Offline (a table lookup and the tz database): the registry runs it inline.
    blocking = False

    def __init__(self, clock: Clock | None = None) -> None:
        # Why injectable: tests pin the instant; production uses the system clock.
        self._clock = clock or utc_now

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        name, key = resolve_place(tool_input)
        now = self._clock()
        if now.tzinfo is None:  # a naive clock is taken to be UTC, never local time
            now = now.replace(tzinfo=UTC)
        local = now.astimezone(ZoneInfo(key))
        return (
            f"{name}: {local:%Y-%m-%d %H:%M} ({local:%A}), time zone {key}, "
            f"{format_offset(local.utcoffset())}"
        )
