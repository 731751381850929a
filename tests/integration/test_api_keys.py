"""API keys at a running API: a wrong key costs the database one lookup per interval,
and every kind of stream opened with a key that is then revoked or rotated ends within
5 s (README, HTTP API)."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jarvis_agents.config import Settings
from jarvis_agents.store import open_repository
from jarvis_agents.store.repository import Repository
from tests.support.api_server import Api, EventStream, wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api

# docs/api.md §15: streams opened with a key that is then revoked or rotated end within 5 s.
ENDED_WITHIN_S = 5


def test_a_wrong_key_costs_one_lookup_per_interval_and_a_new_key_works_at_once(
    pg_url: str, redis_url: str
) -> None:
    """In process, so that every statement the API sends can be counted."""
    from sqlalchemy import event

    from api import create_app

    settings = Settings.from_env(
        {"DATABASE_URL": pg_url, "REDIS_URL": redis_url, "OLLAMA_HOST": "http://127.0.0.1:9"})
    app = create_app(settings)
    context = app.extensions["jarvis"]
    repository = context.service.repository
    lookups: list[str] = []
    event.listen(repository.engine, "before_cursor_execute",
                 lambda conn, cursor, sql, *rest: lookups.append(sql) if "FROM users" in sql else None)
    try:
        client = app.test_client()

        def status(key: str) -> int:
            return client.get("/api/v1/agents", headers={"Authorization": f"Bearer {key}"}).status_code

        assert [status("jrv_not-a-key") for _ in range(50)] == [401] * 50
        assert len(lookups) == 1
        _, key = repository.users.create("fresh")
        assert [status(key) for _ in range(50)] == [200] * 50
        assert len(lookups) == 2
    finally:
        context.close()


class Held:
    """One request the API holds open (a stream, a long-poll), read to its end in the
    background: the events it told, or the answer it gave."""

    def __init__(
        self, api: Api, key: str, method: str, path: str, *, poll: bool = False, **kwargs: Any
    ) -> None:
        self.client = api.client(key, timeout=60)
        self.events: list[Any] | None = None
        self.answer: httpx.Response | None = None
        if poll:
            self.thread = threading.Thread(target=self._poll, args=(path,), daemon=True)
        else:
            self.stream = EventStream(self.client, method, path, **kwargs)
            assert self.stream.response.status_code == 200
            self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            self.events = self.stream.rest()  # until the server ends the response
        except httpx.HTTPError:
            pass  # closed by close() below

    def _poll(self, path: str) -> None:
        self.answer = self.client.get(path)

    @property
    def ended(self) -> bool:
        return not self.thread.is_alive()

    def close(self) -> None:
        if getattr(self, "stream", None) is not None:
            # A shutdown, not a close: a close does not reach a socket another thread
            # reads from, and the server would never see this client leave.
            sock = self.stream.response.extensions["network_stream"].get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            self.thread.join(10)
            self.stream.close()
        self.client.close()


def open_every_kind(api: Api, key: str) -> tuple[list[Held], str]:
    """Each kind of stream, and a long-poll, on a PENDING agent (no worker takes it)."""
    with api.client(key) as http:
        agent_id = http.post("/api/v1/agents", json={"goal": "watched"}).json()["id"]
    held = [
        Held(api, key, "GET", f"/api/v1/agents/{agent_id}/events"),
        Held(api, key, "GET", "/api/v1/events"),
        Held(api, key, "POST", "/api/v1/agents/stream", json={"goal": "streamed"}),
        Held(api, key, "GET", f"/api/v1/agents/{agent_id}?wait=60", poll=True),
    ]
    return held, agent_id


def open_streams(api: Api) -> float:
    """What the API says it holds open (`jarvis_api_open_streams`)."""
    with api.client() as http:
        line = next(line for line in http.get("/metrics").text.splitlines()
                    if line.startswith("jarvis_api_open_streams "))
    return float(line.split()[1])


@pytest.fixture
def keyed_api(shared_api: Any) -> Iterator[tuple[Api, Repository]]:
    # An API of its own: its open-stream count is these tests' alone.
    api = shared_api(JARVIS_MAX_STREAMS_PER_USER="50")
    repository = open_repository(Settings.from_env(api.env), pool_size=1)
    yield api, repository
    repository.engine.dispose()


@pytest.mark.parametrize("change", ["revoke", "rotate"])
def test_streams_opened_with_a_key_then_revoked_or_rotated_end_within_5_s(
    keyed_api: tuple[Api, Repository], change: str
) -> None:
    api, repository = keyed_api
    name = f"watcher-{uuid.uuid4().hex[:8]}"
    _, key = repository.users.create(name)
    bystander = api.user()  # another user's stream is not touched
    held, agent_id = open_every_kind(api, key)
    others = [Held(api, bystander, "GET", "/api/v1/events")]
    try:
        wait_until(lambda: open_streams(api) == 5)
        if change == "revoke":
            repository.users.revoke(name)
        else:
            _, new_key = repository.users.rotate(name)
            others.append(Held(api, new_key, "GET", "/api/v1/events"))

        wait_until(lambda: all(h.ended for h in held), timeout_s=ENDED_WITHIN_S)
        for stream in held[:3]:
            assert stream.events is not None
            assert "done" not in [e.event for e in stream.events]  # cut, not finished
        poll = held[3].answer
        assert poll is not None and poll.status_code == 401
        assert poll.json()["error"]["code"] == "unauthorized"
        assert "revoked or replaced" in poll.json()["error"]["message"]

        # The server let go of them, and kept the others open.
        wait_until(lambda: open_streams(api) == len(others))
        assert not any(h.ended for h in others)
        # Ended by the server, not by a client hanging up: the streamed agent goes on.
        agents, _ = repository.list_agents(repository.users.by_name(name).id, limit=5)
        assert {a.status.value for a in agents} == {"PENDING"}
        assert agent_id in {str(a.id) for a in agents}
    finally:
        for h in held + others:
            h.close()
