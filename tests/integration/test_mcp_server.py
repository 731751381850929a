"""The MCP server (README, MCP server), driven by the official `mcp` client: a real
`jarvis-agents mcp`, API and worker on PostgreSQL and Redis, the fake model server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Process, stop_all
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
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def mcp_url(module_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    started: list[Process] = []
    try:
        yield launch_mcp(module_stack.env, tmp_path_factory.mktemp("mcp") / "mcp.log", started)
    finally:
        stop_all(started)


def agents_of(stack: Any, key: str) -> list[dict[str, Any]]:
    with stack.api.client(key) as http:
        return http.get("/api/v1/agents").json()["agents"]


def test_one_tool_per_assistant_of_the_caller_and_no_one_elses(stack: Any, mcp_url: str) -> None:
    key, other = stack.api.user(), stack.api.user()
    with stack.api.client(key) as http:
        http.post("/api/v1/assistants", json={
            "name": "geographer", "description": "Finds cities.", "output_schema": SCHEMA,
        }).raise_for_status()
    with stack.api.client(other) as http:
        http.post("/api/v1/assistants", json={"name": "secret-helper"}).raise_for_status()

    async def listed(api_key: str, mode: str) -> dict[str, Any]:
        async with mcp_client(mcp_url, api_key, mode=mode) as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    for mode in ("auto", "legacy"):
        tools = run(listed(key, mode))
        assert sorted(tools) == ["agent", "geographer"]
        assert tools["geographer"].description == "Finds cities."
        assert tools["geographer"].output_schema == SCHEMA
        assert tools["agent"].output_schema is None
        assert tools["agent"].input_schema["required"] == ["goal"]
        assert set(tools["agent"].input_schema["properties"]) == {"goal", "thread_id"}
    assert sorted(run(listed(other, "auto"))) == ["agent", "secret-helper"]


def test_a_call_runs_an_agent_and_answers_its_final_answer(stack: Any, mcp_url: str) -> None:
    stack.fake.responder = stack.fake.by_turn(CALC)
    key = stack.api.user()

    async def call() -> Any:
        async with mcp_client(mcp_url, key) as client:
            return await client.call_tool("agent", {"goal": "What is 1234 * 902?"})

    result = run(call())
    assert not result.is_error
    assert [c.text for c in result.content] == ["1113068"]
    [agent] = agents_of(stack, key)
    assert agent["id"] == result.meta["jarvis/agent_id"]
    assert (agent["status"], agent["goal"], agent["final_answer"]) == (
        "COMPLETED", "What is 1234 * 902?", "1113068")


def test_an_assistant_with_an_output_schema_answers_structured_content(
        stack: Any, mcp_url: str) -> None:
    stack.fake.responder = lambda request: 'THOUGHT: known\nFINAL_ANSWER: {"city": "Paris"}'
    key = stack.api.user()
    with stack.api.client(key) as http:
        http.post("/api/v1/assistants", json={"name": "geographer", "output_schema": SCHEMA,
                                             "mode": "react"}).raise_for_status()

    async def call(mode: str) -> Any:
        async with mcp_client(mcp_url, key, mode=mode) as client:
            await client.list_tools()  # as a host does: the client checks results against it
            return await client.call_tool("geographer", {"goal": "Capital of France?"})

    for mode in ("auto", "legacy"):
        result = run(call(mode))
        assert not result.is_error, result
        assert result.structured_content == {"city": "Paris"}
        assert result.content[0].text == '{"city": "Paris"}'


def test_a_failed_agent_is_an_error_result_with_its_error(stack: Any, mcp_url: str) -> None:
    stack.fake.responder = lambda request: "THOUGHT: again\nACTION: calculate\nINPUT: 1 + 1"
    key = stack.api.user()
    with stack.api.client(key) as http:
        http.post("/api/v1/assistants", json={"name": "looper", "max_steps": 2,
                                             "mode": "react"}).raise_for_status()

    async def call() -> Any:
        async with mcp_client(mcp_url, key) as client:
            return await client.call_tool("looper", {"goal": "Loop"})

    result = run(call())
    assert result.is_error
    [agent] = agents_of(stack, key)
    assert agent["status"] == "FAILED" and agent["stop_reason"] == "max_steps"
    assert result.content[0].text == f"agent {agent['id']} failed (max_steps): {agent['error']}"


def test_bad_arguments_and_unknown_tools_are_refused(stack: Any, mcp_url: str) -> None:
    key = stack.api.user()

    async def calls() -> tuple[Any, Any, str]:
        async with mcp_client(mcp_url, key) as client:
            blank = await client.call_tool("agent", {"goal": "  "})
            thread = await client.call_tool("agent", {"goal": "x", "thread_id": "nope"})
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nobody", {"goal": "x"})
            return blank, thread, unknown.value.message

    blank, thread, unknown = run(calls())
    assert blank.is_error and "`goal` must be text of 1 to 4000 characters" in blank.content[0].text
    assert thread.is_error and "`thread_id` must be a thread's id" in thread.content[0].text
    assert "you have no assistant 'nobody'" in unknown
    assert agents_of(stack, key) == []


def test_a_follow_up_in_the_thread_of_an_earlier_call(stack: Any, mcp_url: str) -> None:
    stack.fake.responder = lambda request: "THOUGHT: easy\nFINAL_ANSWER: done"
    key = stack.api.user()

    async def calls() -> tuple[Any, Any]:
        async with mcp_client(mcp_url, key) as client:
            first = await client.call_tool("agent", {"goal": "First"})
            second = await client.call_tool(
                "agent", {"goal": "Then?", "thread_id": first.meta["jarvis/thread_id"]})
            return first, second

    first, second = run(calls())
    assert second.meta["jarvis/thread_id"] == first.meta["jarvis/thread_id"]
    assert second.meta["jarvis/agent_id"] != first.meta["jarvis/agent_id"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_progress_notification_for_every_iteration(stack: Any, mcp_url: str, mode: str) -> None:
    stack.fake.responder = stack.fake.by_turn(CALC)
    key = stack.api.user()
    heard: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append((value, message))

    async def call() -> Any:
        async with mcp_client(mcp_url, key, mode=mode) as client:
            return await client.call_tool("agent", {"goal": "What is 1234 * 902?"},
                                          progress_callback=progress)

    assert run(call()).content[0].text == "1113068"
    values = [value for value, _ in heard]
    assert values == sorted(set(values)), "progress must grow"
    iterations = {message.split(":")[0] for _, message in heard if message}
    assert iterations == {"iteration 1", "iteration 2", "iteration 3"}, heard
    assert "iteration 1: calling calculate" in [message for _, message in heard]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["notifications-cancelled", "dropped"])
def test_a_cancelled_call_cancels_its_agent(stack: Any, mcp_url: str, mode: str) -> None:
    """The handshake era cancels with `notifications/cancelled`, 2026-07-28 by closing the
    request's stream: the client does either as its call is cancelled."""
    stack.fake.responder = stack.fake.by_turn(CALC)
    stack.fake.latency_s = 30.0
    key = stack.api.user()

    async def call_then_cancel() -> None:
        async with mcp_client(mcp_url, key, mode=mode) as client, \
                anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "agent", {"goal": "What is 1234 * 902?"})
            with anyio.fail_after(20):
                while not [a for a in await anyio.to_thread.run_sync(agents_of, stack, key)
                           if a["status"] == "RUNNING"]:
                    await anyio.sleep(0.1)
            group.cancel_scope.cancel()

    run(call_then_cancel())
    [agent] = wait_until(lambda: [a for a in agents_of(stack, key) if a["status"] == "CANCELLED"],
                         timeout_s=20)
    assert agent["stop_reason"] == "cancelled"


@pytest.mark.parametrize("era", ["2026-07-28", "2025-06-18"])
def test_a_request_dropped_by_the_client_cancels_its_agent(
        stack: Any, mcp_url: str, era: str) -> None:
    """The connection closed under a running call (the client went away), without a word;
    in a handshake session (2025-06-18) as in a single exchange (2026-07-28)."""
    stack.fake.responder = stack.fake.by_turn(CALC)
    stack.fake.latency_s = 30.0
    key = stack.api.user()
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": era}
    params: dict[str, Any] = {"name": "agent", "arguments": {"goal": "What is 1234 * 902?"}}
    with httpx.Client(timeout=30) as http:
        if era == "2026-07-28":
            params["_meta"] = {"io.modelcontextprotocol/protocolVersion": era,
                               "io.modelcontextprotocol/clientCapabilities": {}}
            headers |= {"Mcp-Method": "tools/call", "Mcp-Name": "agent"}
        else:
            opened = http.post(mcp_url, headers=headers, json={
                "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": era, "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"}}})
            assert opened.status_code == 200, opened.text
            headers["Mcp-Session-Id"] = opened.headers["Mcp-Session-Id"]
            http.post(mcp_url, headers=headers, json={
                "jsonrpc": "2.0", "method": "notifications/initialized"}).raise_for_status()
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        with http.stream("POST", mcp_url, json=body, headers=headers) as response:
            assert response.status_code == 200
            wait_until(lambda: [a for a in agents_of(stack, key) if a["status"] == "RUNNING"])
    [agent] = wait_until(lambda: [a for a in agents_of(stack, key) if a["status"] == "CANCELLED"],
                         timeout_s=20)
    assert agent["stop_reason"] == "cancelled"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_lasts_as_long_as_its_agent(stack: Any, mcp_url: str, mode: str) -> None:
    """Longer than the client waits for a byte (and than many proxies do): the transport's
    keep-alives hold the connection while the agent thinks."""
    stack.fake.responder = stack.fake.by_turn(CALC)
    stack.fake.latency_s = LONG_CALL_LATENCY_S  # three model calls: past the read timeout
    key = stack.api.user()

    async def call() -> Any:
        async with mcp_client(mcp_url, key, mode=mode, read_timeout_s=READ_TIMEOUT_S) as client:
            return await client.call_tool("agent", {"goal": "What is 1234 * 902?"})

    result = run(call())
    assert not result.is_error and result.content[0].text == "1113068"
    [agent] = agents_of(stack, key)
    assert agent["duration_ms"] > READ_TIMEOUT_S * 1000


@pytest.mark.parametrize("header", [None, "Bearer not-a-key", "Basic abc"])
def test_a_request_without_a_valid_key_is_401(mcp_url: str, header: str | None) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    if header:
        headers["Authorization"] = header
    response = httpx.post(mcp_url, headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
