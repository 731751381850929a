"""Figures a `/metrics` scrape reports from the database, read at most every few seconds.

`/metrics` needs no API key, so anyone may scrape it as often as they like: a scrape
must not cost a query per scrape. The database is read at most once per `fresh_s`
per API process, by one background reader at a time; a scrape waits for a read in
flight at most `wait_s`, so a slow database holds it up that long and no longer.
Figures older than `max_age_s` are never reported (docs/api.md §10: at most 15 s old):
a scrape then raises the last read's error, and the collector reports the source
down. `/readyz` keeps its report the same way (api/health.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

FRESH_S = 10.0
MAX_AGE_S = 15.0
WAIT_S = 2.0


class StaleFigures(Exception):
    """Raised when no reading is recent enough to report and the last read did not fail."""


@dataclass(frozen=True)
class Reading(Generic[T]):
    value: T
    read_at: float  # when the read started (the clock's time): its figures are that old at most


class ScrapeCache(Generic[T]):
    """The last reading of `read`, renewed in the background once it is `fresh_s` old."""

    def __init__(
        self,
        read: Callable[[], T],
        *,
        fresh_s: float = FRESH_S,
        max_age_s: float = MAX_AGE_S,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.fresh_s = fresh_s
        self.max_age_s = max_age_s
        self.wait_s = wait_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: Reading[T] | None = None
        self._error: Exception | None = None
        self._in_flight: threading.Event | None = None  # set when the running read ends

    def get(self) -> T:
        """The figures, at most `max_age_s` old; raises if there are none that recent."""
        with self._lock:
            if self._last is not None and self.clock() - self._last.read_at < self.fresh_s:
                return self._last.value
            done = self._in_flight
            if done is None:
                done = self._in_flight = threading.Event()
                threading.Thread(
                    target=self._renew, args=(done,), name="metrics-read", daemon=True
                ).start()
        done.wait(self.wait_s)
        with self._lock:
            if self._last is not None and self.clock() - self._last.read_at <= self.max_age_s:
                return self._last.value
            raise self._error or StaleFigures(
                f"the database has not answered within {self.wait_s:g} s"
            )

    def _renew(self, done: threading.Event) -> None:
        started = self.clock()
        try:
            value = self.read()
        except Exception as exc:  # noqa: BLE001 - reported by the scrapes that find no figures
            log.warning("metrics: reading the database failed: %s", exc)
            with self._lock:
                self._error = exc
        else:
            with self._lock:
                self._last = Reading(value, started)
                self._error = None
        finally:
            with self._lock:
                self._in_flight = None
            done.set()
