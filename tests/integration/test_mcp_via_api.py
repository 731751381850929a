"""`/mcp` at the API's URL (docs/api.md §14): the official `mcp` client pointed at a real
`jarvis-agents api`, which forwards to the `jarvis-agents mcp` next to it (JARVIS_MCP_PORT),
with a worker on PostgreSQL and Redis and the fake model server."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import Process, free_port, stop_all
from tests.support.api_server import wait_until
from tests.support.mcp_door import (
    LONG_CALL_LATENCY_S,
    READ_TIMEOUT_S,
    launch_mcp,
    mcp_client,
    run,
)

pytest_plugins = ["tests.support.api_fixtures"]
pytestmark = [pytest.mark.integration, pytest.mark.long]

CALC = [
    "THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902",
    "THOUGHT: Check it once more\nACTION: calculate\nINPUT: 1113068 / 902",
    "THOUGHT: done\nFINAL_ANSWER: 1113068",
]
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def mcp_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def stack_extra_env(mcp_port: int) -> dict[str, str]:
    """The module's API forwards `/mcp` to the MCP server on this port."""
    return {"JARVIS_MCP_PORT": str(mcp_port)}


@pytest.fixture(scope="module")
def url(module_stack: Any, mcp_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API's `/mcp`, with the MCP server it forwards to running."""
    started: list[Process] = []
    try:
        launch_mcp(module_stack.env, tmp_path_factory.mktemp("mcp") / "mcp.log", started,
                   port=mcp_port)
        yield f"{module_stack.api.url}/mcp"
    finally:
        stop_all(started)


def agents_of(stack: Any, key: str) -> list[dict[str, Any]]:
    with stack.api.client(key) as http:
        return http.get("/api/v1/agents").json()["agents"]


def running(stack: Any, key: str) -> list[dict[str, Any]]:
    return [a for a in agents_of(stack, key) if a["status"] == "RUNNING"]


def cancelled(stack: Any, key: str) -> list[dict[str, Any]]:
    return [a for a in agents_of(stack, key) if a["status"] == "CANCELLED"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_tools_are_listed_at_the_apis_url(stack: Any, url: str, mode: str) -> None:
    key = stack.api.user()
    with stack.api.client(key) as http:
        http.post("/api/v1/assistants", json={"name": "geographer"}).raise_for_status()

    async def listed() -> list[str]:
        async with mcp_client(url, key, mode=mode) as client:
            return sorted(tool.name for tool in (await client.list_tools()).tools)

    assert run(listed()) == ["agent", "geographer"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_streams_its_progress_and_answers(stack: Any, url: str, mode: str) -> None:
    stack.fake.responder = stack.fake.by_turn(CALC)
    key = stack.api.user()
    heard: list[str | None] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(message)

    async def call() -> Any:
        async with mcp_client(url, key, mode=mode) as client:
            return await client.call_tool("agent", {"goal": "What is 1234 * 902?"},
                                          progress_callback=progress)

    result = run(call())
    assert not result.is_error and result.content[0].text == "1113068"
    assert {message.split(":")[0] for message in heard if message} == {
        "iteration 1", "iteration 2", "iteration 3"}, heard
    [agent] = agents_of(stack, key)
    assert (agent["id"], agent["status"]) == (result.meta["jarvis/agent_id"], "COMPLETED")


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["notifications-cancelled", "dropped"])
def test_a_cancelled_call_cancels_its_agent(stack: Any, url: str, mode: str) -> None:
    stack.fake.responder = stack.fake.by_turn(CALC)
    stack.fake.latency_s = 30.0
    key = stack.api.user()

    async def call_then_cancel() -> None:
        async with mcp_client(url, key, mode=mode) as client, anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "agent", {"goal": "What is 1234 * 902?"})
            with anyio.fail_after(20):
                while not await anyio.to_thread.run_sync(running, stack, key):
                    await anyio.sleep(0.1)
            group.cancel_scope.cancel()

    run(call_then_cancel())
    [agent] = wait_until(lambda: cancelled(stack, key), timeout_s=20)
    assert agent["stop_reason"] == "cancelled"


def test_a_session_request_dropped_by_the_client_cancels_its_agent(stack: Any, url: str) -> None:
    """A handshake session's call, its connection closed without a word: only the forwarded
    request closed with it tells the MCP server (its answer is written at the end)."""
    stack.fake.responder = stack.fake.by_turn(CALC)
    stack.fake.latency_s = 30.0
    key = stack.api.user()
    with httpx.Client(timeout=30) as http:
        headers = session(http, url, key)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "agent", "arguments": {"goal": "What is 1234 * 902?"}}}
        with http.stream("POST", url, json=body, headers=headers) as response:
            assert response.status_code == 200
            wait_until(lambda: running(stack, key))
    [agent] = wait_until(lambda: cancelled(stack, key), timeout_s=20)
    assert agent["stop_reason"] == "cancelled"


def test_a_session_is_held_by_its_header_and_ended_by_delete(stack: Any, url: str) -> None:
    key = stack.api.user()
    with httpx.Client(timeout=30) as http:
        headers = session(http, url, key)
        listed = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 2,
                                                       "method": "tools/list"})
        assert listed.status_code == 200 and '"name":"agent"' in listed.text.replace(" ", "")
        with http.stream("GET", url, headers=headers) as stream:  # the server's own stream
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
        assert http.delete(url, headers=headers).status_code == 200
        gone = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 3,
                                                     "method": "tools/list"})
        assert gone.status_code == 404


def test_a_call_lasts_as_long_as_its_agent(stack: Any, url: str) -> None:
    """Longer than the client waits for a byte: the keep-alives come through the API."""
    stack.fake.responder = stack.fake.by_turn(CALC)
    stack.fake.latency_s = LONG_CALL_LATENCY_S  # three model calls: past the read timeout
    key = stack.api.user()

    async def call() -> Any:
        async with mcp_client(url, key, read_timeout_s=READ_TIMEOUT_S) as client:
            return await client.call_tool("agent", {"goal": "What is 1234 * 902?"})

    result = run(call())
    assert not result.is_error and result.content[0].text == "1113068"
    assert agents_of(stack, key)[0]["duration_ms"] > READ_TIMEOUT_S * 1000


@pytest.mark.parametrize("header", [None, "Bearer not-a-key", "Basic abc"])
def test_a_request_without_a_valid_key_is_the_mcp_servers_401(url: str, header: str | None) -> None:
    headers = {"Accept": ACCEPT} | ({"Authorization": header} if header else {})
    response = httpx.post(url, headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_mcp_server_that_is_down_is_a_503(shared_api: Any) -> None:
    api = shared_api(JARVIS_MCP_URL=f"http://127.0.0.1:{free_port()}/mcp")
    response = httpx.post(f"{api.url}/mcp", headers={"Accept": ACCEPT, "Authorization": "Bearer x"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    assert "the MCP server is not answering" in response.json()["error"]["message"]
    assert response.headers["Retry-After"]


class BriefKeepAlive(socketserver.ThreadingTCPServer):
    """An HTTP server that keeps a connection open after its answer, then closes it idle
    after 0.2 s: sooner than the API reuses kept connections."""

    daemon_threads = True
    closed = 0

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), self.Handler)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.connection.settimeout(0.2)
            try:
                while self.rfile.readline():  # a request line; then its head, up to a blank line
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: 2\r\n\r\n{}")
            except (TimeoutError, ConnectionError):
                pass

    def close_request(self, request: Any) -> None:
        super().close_request(request)
        self.closed += 1


def test_a_kept_connection_the_server_closed_meanwhile_is_not_used(shared_api: Any) -> None:
    with BriefKeepAlive() as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        api = shared_api(JARVIS_MCP_URL=f"http://127.0.0.1:{server.server_address[1]}/mcp")
        with httpx.Client(base_url=api.url) as http:
            assert http.get("/mcp").status_code == 200
            wait_until(lambda: server.closed >= 1)
            again = http.get("/mcp")  # not on the kept connection, which is closed
            assert (again.status_code, again.text) == (200, "{}")
        server.shutdown()


def test_a_forwarding_loop_is_refused(url: str) -> None:
    """JARVIS_MCP_URL pointed at the API itself would forward each request to itself forever."""
    response = httpx.post(url, headers={"Accept": ACCEPT, "Via": "1.1 proxy, 1.1 jarvis-agents-api"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 503
    assert "JARVIS_MCP_URL points at the API itself" in response.json()["error"]["message"]


def test_head_is_not_forwarded(url: str) -> None:
    """MCP has no HEAD, and a HEAD of its GET stream would never end upstream."""
    assert httpx.head(url, headers={"Accept": ACCEPT}).status_code == 405


def session(http: httpx.Client, url: str, key: str) -> dict[str, str]:
    """A handshake session opened (2025-06-18): the headers of its next requests."""
    headers = {"Authorization": f"Bearer {key}", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2025-06-18"}
    opened = http.post(url, headers=headers, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}})
    assert opened.status_code == 200, opened.text
    headers["Mcp-Session-Id"] = opened.headers["Mcp-Session-Id"]
    http.post(url, headers=headers, json={
        "jsonrpc": "2.0", "method": "notifications/initialized"}).raise_for_status()
    return headers
