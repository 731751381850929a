"""The figures /metrics reports from the database: one read at a time, at most every few seconds."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from api.scrape_cache import ScrapeCache, StaleFigures


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Database:
    """A read that counts itself, answers `value`, and can be held or made to fail."""

    def __init__(self) -> None:
        self.reads = 0
        self.value = 1
        self.failure: Exception | None = None
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()

    def read(self) -> int:
        self.reads += 1
        self.started.set()
        assert self.release.wait(10)
        if self.failure is not None:
            raise self.failure
        return self.value


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def database() -> Database:
    return Database()


def test_many_scrapes_at_once_cost_one_read(clock: Clock, database: Database) -> None:
    cache = ScrapeCache(database.read, clock=clock, wait_s=10)
    database.release.clear()
    with ThreadPoolExecutor(20) as pool:
        answers = [pool.submit(cache.get) for _ in range(20)]
        assert database.started.wait(10)
        database.release.set()
        assert [answer.result(timeout=10) for answer in answers] == [1] * 20
    assert database.reads == 1


def test_figures_are_read_again_once_they_are_no_longer_fresh(clock: Clock, database: Database) -> None:
    cache = ScrapeCache(database.read, fresh_s=10, clock=clock)
    assert cache.get() == 1
    database.value = 2
    clock.now += 9.9
    assert cache.get() == 1 and database.reads == 1
    clock.now += 0.2
    assert cache.get() == 2 and database.reads == 2


def test_a_slow_database_holds_a_scrape_up_briefly_and_old_figures_expire(
    clock: Clock, database: Database
) -> None:
    cache = ScrapeCache(database.read, fresh_s=10, max_age_s=15, wait_s=0.05, clock=clock)
    assert cache.get() == 1
    database.release.clear()  # from now on the database does not answer
    clock.now += 12
    assert cache.get() == 1  # waited wait_s for the read, then the 12 s old figures
    clock.now += 4  # 16 s old: too old to report
    with pytest.raises(StaleFigures):
        cache.get()
    assert database.reads == 2  # the scrapes did not pile reads onto the slow database
    database.release.set()


def test_a_failed_read_is_reported_and_tried_again_by_the_next_scrape(
    clock: Clock, database: Database
) -> None:
    cache = ScrapeCache(database.read, clock=clock)
    database.failure = ConnectionError("database down")
    with pytest.raises(ConnectionError, match="database down"):
        cache.get()
    database.failure = None
    assert cache.get() == 1
    assert database.reads == 2
