"""How the CLI shows times: the machine's local time, its zone named, never bare UTC."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from jarvis_agents.cli.terminal import local_time


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("tz", "shown"), [
    ("Asia/Tokyo", "2026-01-02 12:04:05 JST"),
    ("Europe/Paris", "2026-01-02 04:04:05 CET"),
    ("UTC", "2026-01-02 03:04:05 UTC"),
])
def test_api_times_are_shown_in_the_local_zone_with_its_name(
    zone: None, monkeypatch: pytest.MonkeyPatch, tz: str, shown: str
) -> None:
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    assert local_time("2026-01-02T03:04:05.678Z") == shown
    assert local_time("2026-01-02T03:04:05+00:00") == shown


def test_no_time_is_blank_and_a_foreign_one_is_shown_as_it_came() -> None:
    assert local_time(None) == "" and local_time("") == ""
    assert local_time("yesterday") == "yesterday"
