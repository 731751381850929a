"""Helpers for the API's integration tests: a real `jarvis-agents api`, users, an SSE reader.

The fixtures that start servers live in `tests.support.api_fixtures`.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from tests.conftest import Process, cli_env, free_port

CALC_SCRIPT = [
    "THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902",
    "THOUGHT: done\nFINAL_ANSWER: 1113068",
]


@dataclass
class Api:
    """A running `jarvis-agents api` process and how to reach it."""

    url: str
    env: dict[str, str]
    process: Process
    _names: Iterator[int] = field(default_factory=itertools.count)

    def user(self, name: str | None = None) -> str:
        """Create a user straight in the database; returns its API key."""
        from jarvis_agents.config import Settings
        from jarvis_agents.store import open_repository

        name = name or f"user-{time.monotonic_ns()}-{next(self._names)}"
        repository = open_repository(Settings.from_env(self.env), pool_size=1)
        try:
            _, api_key = repository.users.create(name)
        finally:
            repository.engine.dispose()
        return api_key

    def client(self, api_key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kwargs.pop("timeout", 30),
                            **kwargs)

    def open_streams(self) -> float:
        """How many streams and long-polls the API process holds open (its own gauge)."""
        with self.client() as http:
            for line in http.get("/metrics").text.splitlines():
                if line.startswith("jarvis_api_open_streams "):
                    return float(line.split()[1])
        raise AssertionError("no jarvis_api_open_streams in /metrics")


def launch(env: dict[str, str], log_path: Path, started: list[Process]) -> Api:
    port = free_port()
    args = [sys.executable, "-m", "jarvis_agents.cli", "api", "--port", str(port)]
    process = Process(args, cli_env(**env), log_path)
    started.append(process)
    process.wait_for("API listening on", timeout_s=30)
    return Api(f"http://127.0.0.1:{port}", dict(env), process)


# --- server-sent events -------------------------------------------------------------------


@dataclass
class Event:
    event: str
    data: dict[str, Any]
    id: str | None = None


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """SSE frames from a stream of lines; comments (`: keepalive`) are skipped."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "event" in fields or "data" in fields:
                yield Event(fields.get("event", "message"), json.loads(fields.get("data", "null")),
                            fields.get("id"))
            fields = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


class EventStream:
    """An open SSE response, read in the calling thread (each read waits at most `timeout`)."""

    def __init__(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> None:
        self._context = client.stream(method, path, **kwargs)
        self.response = self._context.__enter__()
        self._events = parse_events(self.response.iter_lines())

    def next(self) -> Event | None:
        """The next event, or None once the server has closed the stream."""
        return next(self._events, None)

    def until(self, predicate: Callable[[Event], bool]) -> list[Event]:
        """Events up to and including the first that satisfies `predicate`."""
        seen: list[Event] = []
        while (event := self.next()) is not None:
            seen.append(event)
            if predicate(event):
                return seen
        raise AssertionError(f"the stream ended before the awaited event; saw {seen}")

    def rest(self) -> list[Event]:
        """Every event until the server closes the stream."""
        return list(iter(self.next, None))

    def close(self) -> None:
        self._context.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(predicate: Callable[[], Any], timeout_s: float = 20, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"condition not met within {timeout_s} s")
