"""Every configured MCP server's tools, as the registry's tools that come and go.

`McpTools` starts one `ServerConnection` per server on the process's one event-loop
thread and keeps a snapshot of their tools, rebuilt whenever a server comes up, goes
down or changes its list. An MCP tool is named `<server>__<tool>` (characters outside
`[A-Za-z0-9_-]` become `_`), described as its server describes it, and listed only
while its server is up; a call to it is submitted to the loop and can be cancelled.
With a publisher (tools/mcp/published.py), the snapshot is also written where the
API reads it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp_types as types

from jarvis_agents.tools.base import ToolContext, describe, mcp_source
from jarvis_agents.tools.mcp.config import McpServerConfig
from jarvis_agents.tools.mcp.connection import LIST_TIMEOUT_S, START_TIMEOUT_S, ServerConnection
from jarvis_agents.tools.mcp.loop import EventLoopThread

log = logging.getLogger(__name__)

_OUTSIDE_NAME = re.compile(r"[^A-Za-z0-9_-]")
PUBLISH_INTERVAL_S = 10.0


def tool_name(server: str, tool: str) -> str:
    """The agent tool name of `tool` on `server`."""
    return _OUTSIDE_NAME.sub("_", f"{server}__{tool}")


class Publisher(Protocol):
    """Where a process's MCP servers and tools are made known (Redis, for the API)."""

    def publish(self, servers: dict[str, dict[str, Any]]) -> None: ...
    def withdraw(self) -> None: ...


@dataclass(frozen=True, eq=False)
class McpTool:
    """One tool of an MCP server, as an agent tool (a SubmittedTool)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    source: str
    remote_name: str
    connection: ServerConnection
    loop: EventLoopThread

    def submit(self, arguments: Mapping[str, Any], *, context: ToolContext) -> Future[str]:
        return self.loop.submit(self.connection.call(self.remote_name, arguments,
                                                     idempotency_key=context.idempotency_key))


class McpTools:
    """The tools of every configured MCP server, kept up to date (a ToolProvider)."""

    def __init__(self, servers: Sequence[McpServerConfig], *, publisher: Publisher | None = None,
                 start_timeout_s: float = START_TIMEOUT_S, list_timeout_s: float = LIST_TIMEOUT_S,
                 publish_interval_s: float = PUBLISH_INTERVAL_S) -> None:
        self._loop = EventLoopThread()
        self._publisher = publisher
        self._publish_interval_s = publish_interval_s
        self._tools: tuple[McpTool, ...] = ()
        self._moved = threading.Event()
        self._connections = [
            ServerConnection(config, on_change=self._changed, start_timeout_s=start_timeout_s,
                             list_timeout_s=list_timeout_s)
            for config in servers
        ]
        self._republish: anyio.Event | None = None
        for connection in self._connections:
            self._loop.submit(connection.run())
        if publisher is not None:
            self._loop.submit(self._publish_forever())

    def tools(self) -> Sequence[McpTool]:
        """The tools of the servers that are up, in the configuration's order."""
        return self._tools

    def servers(self) -> dict[str, dict[str, Any]]:
        """Each server's state and tools, as published: {"ok", "error", "tools"}."""
        return {
            connection.name: {
                "ok": connection.state.up, "error": connection.state.error,
                "tools": [describe(t) for t in self._tools if t.connection is connection],
            }
            for connection in self._connections
        }

    def wait_started(self, timeout_s: float) -> bool:
        """Wait until every server is up or has failed once; False if `timeout_s` pass first."""
        deadline = time.monotonic() + timeout_s
        while any(c.state.error == "starting" for c in self._connections):
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return False
            self._moved.wait(left_s)
            self._moved.clear()
        return True

    def close(self) -> None:
        """Stop the servers' sessions (stdio servers exit) and withdraw what was published."""
        self._loop.stop()
        if self._publisher is not None:
            try:
                self._publisher.withdraw()
            except Exception as exc:  # noqa: BLE001 - at exit, the key's expiry does it
                log.warning("could not withdraw the published MCP tools: %s", exc)

    def _changed(self) -> None:
        # On the loop thread: rebuild the snapshot, then wake whoever waits on it.
        tools: dict[str, McpTool] = {}
        for connection in self._connections:
            if not connection.state.up:
                continue
            for remote in connection.state.tools:
                tool = _as_tool(connection, remote, self._loop)
                if tool.name.lower() in tools:
                    log.warning("MCP tool %s of server %r is hidden by another of the same name",
                                remote.name, connection.name)
                    continue
                tools[tool.name.lower()] = tool
        self._tools = tuple(tools.values())
        self._moved.set()
        if self._republish is not None:
            self._republish.set()

    async def _publish_forever(self) -> None:
        assert self._publisher is not None
        while True:
            self._republish = anyio.Event()
            try:
                await anyio.to_thread.run_sync(self._publisher.publish, self.servers())
            except Exception as exc:  # noqa: BLE001 - Redis away: the next round publishes
                log.warning("could not publish the MCP tools: %s", exc)
            with anyio.move_on_after(self._publish_interval_s):
                await self._republish.wait()


def _as_tool(connection: ServerConnection, remote: types.Tool, loop: EventLoopThread) -> McpTool:
    schema = remote.input_schema if isinstance(remote.input_schema, dict) else {}
    if schema.get("type") != "object":
        schema = {"type": "object", **schema}
    description = (remote.description or remote.title or
                   f"The tool {remote.name} of the MCP server {connection.name}.")
    return McpTool(tool_name(connection.name, remote.name), " ".join(description.split()),
                   schema, mcp_source(connection.name), remote.name, connection, loop)
