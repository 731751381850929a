"""JARVIS_MAX_STREAMS_PER_USER: a user's open SSE streams and long-polls, past the limit a 429."""

from __future__ import annotations

import threading
import uuid
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.support.api_server import EventStream, wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api

LIMIT = 5
AGENTS = "/api/v1/agents"


def try_stream(http: httpx.Client, method: str, path: str, **kwargs: Any) -> EventStream | None:
    """The stream if the API opened it; None (and the answer closed) if it said 429."""
    stream = EventStream(http, method, path, **kwargs)
    if stream.response.status_code == 429:
        stream.response.read()
        body = stream.response.json()
        assert body["error"]["code"] == "too_many_streams", body
        assert int(stream.response.headers["Retry-After"]) >= 1
        stream.close()
        return None
    assert stream.response.status_code == 200, stream.response.read()
    return stream


def test_a_user_past_the_limit_gets_429_until_a_stream_or_wait_ends(shared_api):
    api = shared_api(JARVIS_MAX_STREAMS_PER_USER=str(LIMIT))  # no worker: agents stay PENDING
    alice_key = api.user()
    with ExitStack() as held, api.client(alice_key) as alice, api.client(api.user()) as bob:
        watched = alice.post(AGENTS, json={"goal": "watched"}).json()["id"]
        awaited = alice.post(AGENTS, json={"goal": "awaited"}).json()["id"]
        # Requests refused after taking their slot give it back.
        for _ in range(2 * LIMIT):
            assert alice.get(f"{AGENTS}/{uuid.uuid4()}/events").status_code == 404

        long_poll: list[httpx.Response] = []

        def wait_for_awaited() -> None:
            with api.client(alice_key, timeout=90) as own:
                long_poll.append(own.get(f"{AGENTS}/{awaited}", params={"wait": 60}))

        waiter = threading.Thread(target=wait_for_awaited)
        waiter.start()
        held.callback(waiter.join, 30)
        wait_until(lambda: api.open_streams() == 1)
        opened = [
            try_stream(alice, "POST", f"{AGENTS}/stream", json={"goal": "streamed"}),
            try_stream(alice, "GET", f"{AGENTS}/{watched}/events"),
            try_stream(alice, "GET", f"{AGENTS}/{watched}/events"),
            try_stream(alice, "GET", "/api/v1/events"),
        ]
        assert all(opened)
        for stream in opened:
            held.enter_context(stream)  # type: ignore[arg-type]

        # The limit is reached: every kind of stream and long-poll is refused, nothing created.
        agents_before = len(alice.get(AGENTS, params={"limit": 100}).json()["agents"])
        assert try_stream(alice, "GET", "/api/v1/events") is None
        assert try_stream(alice, "GET", f"{AGENTS}/{watched}/events") is None
        assert try_stream(alice, "POST", f"{AGENTS}/stream", json={"goal": "one too many"}) is None
        refused = alice.get(f"{AGENTS}/{watched}", params={"wait": 1})
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_streams"
        assert len(alice.get(AGENTS, params={"limit": 100}).json()["agents"]) == agents_before
        assert alice.get(f"{AGENTS}/{watched}").status_code == 200  # no wait: not a stream

        # Another user is unaffected.
        theirs = try_stream(bob, "GET", "/api/v1/events")
        assert theirs is not None
        held.enter_context(theirs)

        # A client that hangs up frees its slot: the next stream is accepted.
        opened[3].close()
        reopened = wait_until(lambda: try_stream(alice, "GET", "/api/v1/events"))
        held.enter_context(reopened)
        assert try_stream(alice, "GET", "/api/v1/events") is None

        # So does a long-poll that ends (its agent is cancelled).
        assert alice.delete(f"{AGENTS}/{awaited}").status_code == 200
        waiter.join(30)
        assert long_poll[0].status_code == 200 and long_poll[0].json()["status"] == "CANCELLED"
        held.enter_context(wait_until(lambda: try_stream(alice, "GET", "/api/v1/events")))
        assert try_stream(alice, "GET", "/api/v1/events") is None
