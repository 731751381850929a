"""The getTime tool: cities and IANA zones resolved offline, against a fixed clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import ToolError
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.builtin.get_time import GetTimeTool, city_table, resolve_place
from jarvis_agents.tools.http import make_http_client

NOVEMBER = datetime(2026, 11, 29, 12, 5, tzinfo=UTC)  # a Sunday
JULY = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def context(tmp_path: Path) -> Iterator[ToolContext]:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    with make_http_client(settings) as client:
        yield ToolContext(settings=settings, http=client, timeout_s=settings.tool_timeout_s)


def at(instant: datetime) -> GetTimeTool:
    return GetTimeTool(clock=lambda: instant)


def test_a_city_in_the_documented_format(context: ToolContext) -> None:
    assert at(NOVEMBER).run("Tokyo", context=context) == (
        "Tokyo: 2026-11-29 21:05 (Sunday), time zone Asia/Tokyo, UTC+09:00"
    )


@pytest.mark.parametrize(
    ("place", "name", "zone"),
    [
        ("tokyo", "Tokyo", "Asia/Tokyo"),
        ("  TOKYO ", "Tokyo", "Asia/Tokyo"),
        ("tokyo, japan", "Tokyo", "Asia/Tokyo"),
        ("New York City", "New York", "America/New_York"),
        ("NYC", "New York", "America/New_York"),
        ("new york", "New York", "America/New_York"),
        ("São Paulo", "São Paulo", "America/Sao_Paulo"),
        ("Sao Paulo", "São Paulo", "America/Sao_Paulo"),
        ("sao paulo, brazil", "São Paulo", "America/Sao_Paulo"),
        ("Zurich", "Zürich", "Europe/Zurich"),
        ("St. John's", "St. John's", "America/St_Johns"),
        ("What is the time in Paris?", "Paris", "Europe/Paris"),
        ("current time in Sydney", "Sydney", "Australia/Sydney"),
        ('"London"', "London", "Europe/London"),
        ("Ushuaia", "Ushuaia", "America/Argentina/Ushuaia"),  # from the zone database
        ("Europe/London", "Europe/London", "Europe/London"),
        ("europe/london", "Europe/London", "Europe/London"),
        (
            "America/Argentina/Buenos_Aires",
            "America/Argentina/Buenos_Aires",
            "America/Argentina/Buenos_Aires",
        ),
        ("UTC", "UTC", "UTC"),
        ("", "UTC", "UTC"),
    ],
)
def test_places_resolve(place: str, name: str, zone: str) -> None:
    assert resolve_place(place) == (name, zone)


@pytest.mark.parametrize(
    ("place", "instant", "expected"),
    [
        (
            "New York",
            NOVEMBER,
            "New York: 2026-11-29 07:05 (Sunday), time zone America/New_York, UTC-05:00",
        ),
        (
            "New York",
            JULY,
            "New York: 2026-07-01 08:00 (Wednesday), time zone America/New_York, UTC-04:00",
        ),
        (
            "London",
            JULY,
            "London: 2026-07-01 13:00 (Wednesday), time zone Europe/London, UTC+01:00",
        ),
        (
            "Mumbai",
            NOVEMBER,
            "Mumbai: 2026-11-29 17:35 (Sunday), time zone Asia/Kolkata, UTC+05:30",
        ),
        (
            "Kathmandu",
            NOVEMBER,
            "Kathmandu: 2026-11-29 17:50 (Sunday), time zone Asia/Kathmandu, UTC+05:45",
        ),
        (
            "St. John's",
            NOVEMBER,
            "St. John's: 2026-11-29 08:35 (Sunday), time zone America/St_Johns, UTC-03:30",
        ),
        (
            "Auckland",
            NOVEMBER,
            "Auckland: 2026-11-30 01:05 (Monday), time zone Pacific/Auckland, UTC+13:00",
        ),
        ("Etc/UTC", NOVEMBER, "Etc/UTC: 2026-11-29 12:05 (Sunday), time zone Etc/UTC, UTC+00:00"),
    ],
)
def test_offsets_and_daylight_saving(
    place: str, instant: datetime, expected: str, context: ToolContext
) -> None:
    assert at(instant).run(place, context=context) == expected


def test_a_naive_clock_is_taken_as_utc(context: ToolContext) -> None:
    naive = GetTimeTool(clock=lambda: datetime(2026, 11, 29, 12, 5))
    assert "21:05" in naive.run("Tokyo", context=context)


@pytest.mark.parametrize(
    "place", ["Atlantis", "Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime", "x" * 500]
)
def test_unknown_places_suggest_an_iana_name(place: str, context: ToolContext) -> None:
    with pytest.raises(ToolError) as caught:
        at(NOVEMBER).run(place, context=context)
    message = str(caught.value)
    assert message.startswith("Unknown place")
    assert "Europe/London" in message
    assert len(message) < 300


def test_the_city_table_is_large_and_every_zone_is_real() -> None:
    table = city_table()
    names = {name for name, _ in table.values()}
    assert len(names) >= 100
    for name, zone in table.values():
        assert ZoneInfo(zone).key == zone, name


def test_the_default_clock_is_now(context: ToolContext) -> None:
    answer = GetTimeTool().run("UTC", context=context)
    shown = datetime.strptime(answer[len("UTC: ") :][:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    assert abs(shown - datetime.now(UTC)) < timedelta(minutes=2)
    assert answer.endswith("time zone UTC, UTC+00:00")


def test_the_tool_describes_itself() -> None:
    tool = GetTimeTool()
    assert tool.name == "getTime"
    assert "IANA" in tool.description
    assert tool.input_hint
