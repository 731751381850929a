"""MCP tools against real MCP servers (tests/support/mcp_servers.py), over stdio and HTTP:
listed and called through the registry, every failure an observation, the list kept
current, and what a worker publishes read back as the API reads it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled
from jarvis_agents.tools.mcp.config import McpServerConfig
from jarvis_agents.tools.mcp.provider import McpTools
from jarvis_agents.tools.mcp.published import PublishedTools, RedisPublisher
from jarvis_agents.tools.registry import ToolRegistry
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.mcp_fixtures"]  # http_server

# Longer than any call takes on a loaded machine; the timeout test asks for SHORT_S.
TOOL_TIMEOUT_S = 60.0
SHORT_S = 2.0
HOUR = 3600.0  # a call nothing sits out: only a timeout or a stop ends it in the test's time


def stdio(name: str, kind: str, **env: str) -> McpServerConfig:
    return McpServerConfig(name, command=sys.executable, args=("-m", "tests.support.mcp_servers", kind),
                           env=env)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}).with_overrides(
        tool_timeout_s=TOOL_TIMEOUT_S, tool_output_max_chars=1000)


@pytest.fixture
def open_tools(settings: Settings) -> Iterator[Callable[..., tuple[McpTools, ToolRegistry]]]:
    made: list[ToolRegistry] = []

    def open_(*servers: McpServerConfig, tool_timeout_s: float = TOOL_TIMEOUT_S,
              **options: object) -> tuple[McpTools, ToolRegistry]:
        mcp = McpTools(servers, **options)  # type: ignore[arg-type]
        registry = ToolRegistry.default(settings.with_overrides(tool_timeout_s=tool_timeout_s),
                                        providers=[mcp])
        made.append(registry)
        assert mcp.wait_started(30)
        return mcp, registry

    yield open_
    for registry in made:
        registry.close()


def test_stdio_and_http_tools_are_listed_and_called(http_server, open_tools) -> None:
    _, registry = open_tools(stdio("srv", "calc"), McpServerConfig("web", url=http_server("calc")))
    listed = {tool["name"]: tool for tool in registry.describe()}
    assert {"srv__add", "srv__echo", "web__add", "web__echo"} <= set(listed)
    assert listed["srv__add"]["source"] == "mcp:srv" and listed["web__echo"]["source"] == "mcp:web"
    assert listed["srv__add"]["description"] == "Add two whole numbers."
    assert listed["srv__add"]["input_schema"]["required"] == ["a", "b"]
    assert listed["calculate"]["source"] == "builtin"

    assert registry.call_text("srv__add", '{"a": 2, "b": 40}').content == "42"
    assert registry.call_text("web__add", '{"a": 1, "b": 2}').content == "3"
    assert registry.call_text("web__echo", "over http").content == "over http"  # one string: plain text
    big = registry.call_text("srv__big", "")
    assert big.ok and len(big.content) <= 1000 and "truncated" in big.content


def test_a_call_sends_its_idempotency_key_in_meta(http_server, open_tools, tmp_path: Path) -> None:
    stdio_record, http_record = tmp_path / "stdio.jsonl", tmp_path / "http.jsonl"
    _, registry = open_tools(stdio("led", "ledger", MCP_RECORD=str(stdio_record)),
                             McpServerConfig("web", url=http_server("ledger", MCP_RECORD=str(http_record))))
    assert registry.call("led__record", {"text": "a"}, idempotency_key="agent-1:c1").ok
    assert registry.call_text("web__record", "b", idempotency_key="agent-1:c2").ok
    assert registry.call_text("web__record", "c").ok  # a call outside an agent: no key
    assert [json.loads(line) for line in stdio_record.read_text().splitlines()] == [
        {"text": "a", "key": "agent-1:c1"}]
    assert [json.loads(line) for line in http_record.read_text().splitlines()] == [
        {"text": "b", "key": "agent-1:c2"}, {"text": "c", "key": None}]


def test_an_error_result_a_crash_and_a_dead_server_are_observations(open_tools) -> None:
    mcp, registry = open_tools(stdio("srv", "calc"), stdio("crashy", "crashy"),
                               McpServerConfig("dead", command="/nonexistent/mcp-server"))
    failed = registry.call_text("srv__fail", "")
    assert not failed.ok and failed.content.startswith("The tool reported an error:")

    crashed = registry.call_text("crashy__explode", "")
    assert not crashed.ok
    assert "The MCP server 'crashy' closed the connection during the call" in crashed.content
    # Started again with backoff, and it works again.
    wait_until(lambda: registry.call_text("crashy__echo", "back").content == "back", timeout_s=30)

    assert not any(name.startswith("dead__") for name in registry.names())
    dead = mcp.servers()["dead"]
    assert dead["ok"] is False and "No such file or directory" in dead["error"]
    assert registry.call_text("srv__echo", "the rest work").content == "the rest work"


def test_a_slow_call_times_out_and_its_request_is_cancelled(open_tools, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    _, registry = open_tools(stdio("slow", "slow", MCP_MARKER=str(marker)), tool_timeout_s=SHORT_S)
    result = registry.call_text("slow__sleep", f'{{"seconds": {HOUR}}}')
    assert not result.ok and result.content.startswith("Tool 'slow__sleep' timed out after 2 s")
    wait_until(lambda: marker.exists() and marker.read_text() == "cancelled", timeout_s=10)
    assert registry.call_text("slow__sleep", '{"seconds": 0.1}').content == "slept 0.1 s"


def test_a_stopped_agent_cancels_its_mcp_call(open_tools, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    # No timeout to end the call first: the agent stops once the server is under way.
    _, registry = open_tools(stdio("slow", "slow", MCP_MARKER=str(marker)), tool_timeout_s=HOUR)

    def under_way() -> bool:
        return marker.exists() and marker.read_text() == "started"

    with pytest.raises(Cancelled):
        registry.call_text("slow__sleep", f'{{"seconds": {HOUR}}}', should_stop=under_way)
    wait_until(lambda: marker.exists() and marker.read_text() == "cancelled", timeout_s=10)


def test_the_list_changes_when_the_server_says_so(http_server, open_tools) -> None:
    _, registry = open_tools(stdio("live", "changing"), McpServerConfig("web", url=http_server("changing")))
    assert "live__extra" not in registry.names()
    assert registry.call_text("live__grow", "").content == "grown"
    wait_until(lambda: "live__extra" in registry.names(), timeout_s=10)
    assert registry.call_text("live__extra", "hi").content == "extra: hi"
    assert registry.call_text("web__grow", "").content == "grown"
    wait_until(lambda: "web__extra" in registry.names(), timeout_s=10)


def test_a_server_that_does_not_list_its_tools_in_time_is_down(http_server, open_tools) -> None:
    mcp, registry = open_tools(McpServerConfig("web", url=http_server("stalling")),
                               stdio("srv", "calc"), list_timeout_s=1.0)
    assert registry.call_text("web__stall", "").content == "stalled"  # it will list no more
    wait_until(lambda: "web__ping" not in registry.names(), timeout_s=10)
    assert mcp.servers()["web"] == {"ok": False, "tools": [],
                                    "error": "did not list its tools within 1 s"}
    called = registry.call_text("web__ping", "")
    assert not called.ok and called.content.startswith("Unknown tool 'web__ping'")
    assert registry.call_text("srv__echo", "the rest work").content == "the rest work"


def test_what_a_worker_publishes_is_what_the_api_lists(open_tools, redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    servers = (stdio("srv", "calc"), McpServerConfig("dead", command="/nonexistent/mcp-server"),
               McpServerConfig("later", url="http://127.0.0.1:9/mcp"))
    api_view = PublishedTools(client, static=[{"name": "calculate", "description": "…",
                                               "source": "builtin", "input_schema": {}}],
                              servers=servers, cache_s=0)
    assert [tool["name"] for tool in api_view.describe()] == ["calculate"]  # no worker yet

    _, registry = open_tools(*servers, publisher=RedisPublisher(client, worker_id="w1"))
    wait_until(lambda: "srv__add" in api_view.names(), timeout_s=15)
    listed = {tool["name"]: tool for tool in api_view.describe()}
    assert listed["srv__add"]["source"] == "mcp:srv"
    assert listed["srv__add"]["input_schema"]["properties"]["a"]["type"] == "integer"
    assert api_view.canonical("SRV__ADD") == "srv__add"
    assert api_view.canonical("srv__nope") is None  # srv has answered: only its real tools
    assert api_view.canonical("later__anything") == "later__anything"  # not up yet: accepted
    assert api_view.canonical("other__add") is None

    ready = wait_until(lambda: (r := api_view.readiness())["servers"]["later"]["error"] != (
        "no running worker has reported it") and r, timeout_s=15)
    assert ready["servers"]["srv"] == {"ok": True, "error": None, "tools": 5}
    assert ready["servers"]["dead"]["ok"] is False
    assert any(w.startswith("MCP server 'dead' is not available") for w in ready["warnings"])

    registry.close()  # the worker stops: what it published goes with it
    wait_until(lambda: api_view.names() == ["calculate"], timeout_s=5)
    client.close()
