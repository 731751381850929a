"""JarvisClient over httpx.MockTransport: requests, error sentences, event streams (parsed
by httpx-sse) and the reconnect after a dropped one (with Last-Event-ID, nothing twice)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from jarvis_agents.cli.client import ApiError, ApiUnreachable, JarvisClient
from jarvis_agents.cli.client_errors import BAD_KEY
from jarvis_agents.errors import ConfigError, JarvisError, RequestError

URL = "http://jarvis.test"
AGENT_ID = "5f0c1f7e-6a52-4c0e-9d1b-2f5a8e7c3b41"  # fixed: it names a parametrized test
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler) -> JarvisClient:
    return JarvisClient(URL, "jrv_key", transport=httpx.MockTransport(handler))


def error(status: int, code: str, message: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}}, headers=headers)


def sse(*frames: str) -> bytes:
    return "".join(frames).encode()


def step(seq: int, kind: str = "think") -> str:
    data = {"agent_id": AGENT_ID, "seq": seq, "step": 0, "type": kind, "tool": None, "content": f"s{seq}"}
    return f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"


DONE = f'event: done\ndata: {{"agent_id": "{AGENT_ID}", "status": "COMPLETED", "stop_reason": "final_answer"}}\n\n'


# --- what an event stream carries ---------------------------------------------------------


def stream_of(body: bytes) -> list[tuple[str, str, str]]:
    """Every event of a streamed create whose answer is `body`."""

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": "text/event-stream", "Location": f"/api/v1/agents/{AGENT_ID}"}
        return httpx.Response(200, headers=headers, content=body)

    _, stream = client(handler).stream_create("goal")
    with stream:
        return [(e.event, e.data, e.id) for e in stream]


def test_events_keep_the_event_stream_rules() -> None:
    body = (
        b": keepalive\n\n"
        b'id: 7\nevent: observe\ndata: {"a":\ndata: 1}\n\n'
        b": keepalive\n\n"  # after an id: still no event (httpx-sse#35)
        b"event: done\r\ndata:{}\r\n\r\n"
        b"id: 9\ndata: cut off"  # no closing blank line: never dispatched
    )
    assert stream_of(body) == [("observe", '{"a":\n1}', "7"), ("done", "{}", "7")]


def test_an_answer_that_is_not_an_event_stream_is_an_api_error() -> None:
    with pytest.raises(ApiError, match="did not answer with an event stream"):
        list(client(lambda request: httpx.Response(200, json={"agents": []})).events(AGENT_ID))


# --- requests and their errors ----------------------------------------------------------


def test_create_sends_only_the_given_fields_and_the_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"id": AGENT_ID, "status": "PENDING"})

    agent = client(handler).create("goal", max_steps=3, tools=["calculate"], idempotency_key="k1")

    assert agent == {"id": AGENT_ID, "status": "PENDING"}
    request = seen[0]
    assert (request.method, request.url.path) == ("POST", "/api/v1/agents")
    assert json.loads(request.content) == {"goal": "goal", "max_steps": 3, "tools": ["calculate"]}
    assert request.headers["Authorization"] == "Bearer jrv_key"
    assert request.headers["Idempotency-Key"] == "k1"


def test_get_list_steps_cancel_and_tools_use_the_documented_paths() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}?{request.url.query.decode()}")
        if request.url.path.endswith("/steps"):
            return httpx.Response(200, json={"steps": [{"seq": 4}]})
        if request.url.path.endswith("/tools"):
            return httpx.Response(200, json={"tools": [{"name": "calculate", "description": "d"}]})
        return httpx.Response(200, json={"agents": [], "next_cursor": None})

    jarvis = client(handler)
    jarvis.get(AGENT_ID, wait=5)
    jarvis.list(status="RUNNING", limit=5)
    assert jarvis.steps(AGENT_ID, after=3) == [{"seq": 4}]
    jarvis.cancel(AGENT_ID)
    assert jarvis.tools() == [{"name": "calculate", "description": "d"}]
    assert seen == [
        f"GET /api/v1/agents/{AGENT_ID}?wait=5",
        "GET /api/v1/agents?status=RUNNING&limit=5",
        f"GET /api/v1/agents/{AGENT_ID}/steps?after=3",
        f"DELETE /api/v1/agents/{AGENT_ID}?",
        "GET /api/v1/tools?",
    ]


@pytest.mark.parametrize(
    ("response", "status", "message"),
    [
        (error(401, "unauthorized", "the API key is not valid"), 401, BAD_KEY),
        (error(404, "not_found", "no agent with id 'x'"), 404, f"no agent with id {AGENT_ID}"),
        (error(409, "agent_terminal", "agent is already COMPLETED"), 409, "agent is already COMPLETED"),
        (error(429, "too_many_active_agents", "too many", **{"Retry-After": "5"}), 429,
         "too many (retry after 5 s)"),
        (httpx.Response(502, text="<html>bad gateway</html>"), 502, "the API answered 502 Bad Gateway"),
    ],
)
def test_error_answers_become_one_sentence(response: httpx.Response, status: int, message: str) -> None:
    with pytest.raises(ApiError) as raised:
        client(lambda request: response).cancel(AGENT_ID)
    assert (raised.value.status, str(raised.value)) == (status, message)
    assert isinstance(raised.value, JarvisError)


def test_a_malformed_id_never_reaches_the_network() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    with pytest.raises(RequestError, match="'../tools' is not an agent id"):
        client(handler).get("../tools")


def test_an_unreachable_api_says_where_and_what_to_do() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ApiUnreachable) as raised:
        client(handler).tools()
    assert str(raised.value) == (
        f"cannot reach the jarvis-agents API at {URL}: connection refused (is `jarvis-agents up` running?)"
    )


# --- event streams ----------------------------------------------------------------------


class Dropped(httpx.ByteStream):
    """A body that sends some frames, then loses the connection."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise httpx.ReadError("connection reset by peer")


def test_events_rejoin_after_a_drop_with_the_last_seq_and_stop_at_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jarvis_agents.cli.client.RECONNECT_DELAYS_S", (0.0, 0.0))
    resumed: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        resumed.append(request.headers.get("Last-Event-ID"))
        headers = {"Content-Type": "text/event-stream"}
        if len(resumed) == 1:
            return httpx.Response(200, headers=headers, stream=Dropped(sse(step(1), step(2, "act"))))
        if len(resumed) == 2:
            return httpx.Response(200, headers=headers, content=sse(step(3, "observe")))  # ends early
        return httpx.Response(200, headers=headers, content=sse(": keepalive\n\n", step(4), DONE, step(99)))

    events = list(client(handler).events(AGENT_ID))

    # `done` carries no id of its own: its id is the stream's last one (WHATWG).
    assert [(e.event, e.id) for e in events] == [
        ("think", "1"), ("act", "2"), ("observe", "3"), ("think", "4"), ("done", "4"),
    ]
    assert resumed == [None, "2", "3"]


def test_events_give_up_after_repeated_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jarvis_agents.cli.client.RECONNECT_DELAYS_S", (0.0, 0.0))
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ApiUnreachable, match="connection refused"):
        list(client(handler).events(AGENT_ID))
    assert len(calls) == 3  # the first try and one per delay


def test_stream_create_returns_the_agent_id_from_location() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("POST", "/api/v1/agents/stream")
        assert request.headers["Accept"] == "text/event-stream"
        return httpx.Response(200, headers={"Location": f"/api/v1/agents/{AGENT_ID}",
                                            "Content-Type": "text/event-stream"},
                              content=sse(step(1), DONE))

    agent_id, stream = client(handler).stream_create("goal")
    with stream:
        assert agent_id == AGENT_ID
        assert [e.event for e in stream] == ["think", "done"]


def test_a_refused_stream_is_an_api_error() -> None:
    with pytest.raises(ApiError, match="unknown tool"):
        client(lambda request: error(400, "unknown_tool", "unknown tool(s): x")).stream_create("g", tools=["x"])


# --- configuration ------------------------------------------------------------------------


def test_from_env_uses_the_url_and_key_or_those_saved_by_up(tmp_path: Path) -> None:
    jarvis = JarvisClient.from_env({"JARVIS_URL": "http://api.example:9000/", "JARVIS_API_KEY": "jrv_a"})
    assert jarvis.base_url == "http://api.example:9000"
    (tmp_path / "api_key").write_text("jrv_saved\n")
    saved = JarvisClient.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    assert saved.base_url == "http://127.0.0.1:8000"
    assert saved._http.headers["Authorization"] == "Bearer jrv_saved"
    (tmp_path / "api_url").write_text("http://127.0.0.1:8123\n")  # `up --port 8123`
    assert JarvisClient.from_env({"JARVIS_DATA_DIR": str(tmp_path)}).base_url == "http://127.0.0.1:8123"
    assert JarvisClient.from_env(
        {"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_URL": "http://api.example:9000"}
    ).base_url == "http://api.example:9000"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JARVIS_DATA_DIR": "/nonexistent"}, "no API key"),
        ({"JARVIS_API_KEY": "k", "JARVIS_URL": "localhost:8000"}, "JARVIS_URL is not a valid URL"),
    ],
)
def test_from_env_refuses_what_it_cannot_use(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        JarvisClient.from_env(env)
