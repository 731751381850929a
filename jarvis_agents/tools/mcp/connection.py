"""One MCP server, kept: started (stdio) or reached (Streamable HTTP), watched, restarted.

`ServerConnection.run` is the server's supervisor, a task on the process's MCP loop. It
connects with the SDK's `Client` (protocol negotiated: `auto`), lists the tools, and
then holds the session until it is lost; it lists them again whenever the server says
they changed (`notifications/tools/list_changed`, which 2026-07-28 servers send on a
`subscriptions/listen` stream and older ones unasked). A lost session is noticed when
the listen stream drops, when a stdio server's output ends (it exited), or when a call
finds the connection closed; the supervisor then starts the server again under
`retry.mcp_restart_policy`. While it is down, its calls answer with a sentence saying
so and its tools are left out of the listings.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Self

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import Transport
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost

from jarvis_agents.errors import ToolError, first_line
from jarvis_agents.retry import McpServerDown, mcp_restart_policy
from jarvis_agents.tools.mcp.config import McpServerConfig

log = logging.getLogger(__name__)

# A server may take a while to start (npx and uvx fetch packages on their first run).
START_TIMEOUT_S = 60.0
# A server that does not answer a list of its tools within this, once up, is hung: its
# session is dropped and started again, as for a lost one.
LIST_TIMEOUT_S = 30.0
# A session that lasted this long was healthy: after it is lost, start again at once
# rather than after the backoff the last failures had built up.
STABLE_S = 30.0
MAX_TOOL_PAGES = 100
# Where a call's idempotency key goes in its request's `_meta`.
IDEMPOTENCY_META_KEY = "jarvis/idempotency_key"
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults
# What a call raises when the connection itself failed: the session is then restarted.
_TRANSPORT_ERRORS = (OSError, httpx2.HTTPError, anyio.BrokenResourceError,
                     anyio.ClosedResourceError, anyio.EndOfStream)


@dataclass(frozen=True)
class ServerState:
    """What is known of a server now; replaced whole, so any thread may read it."""

    up: bool = False
    error: str | None = "starting"
    tools: tuple[types.Tool, ...] = ()
    since: float = field(default_factory=time.time)


class ServerConnection:
    """The session with one MCP server, and the calls made on it."""

    def __init__(self, config: McpServerConfig, *, on_change: Callable[[], None],
                 start_timeout_s: float = START_TIMEOUT_S,
                 list_timeout_s: float = LIST_TIMEOUT_S) -> None:
        self.config = config
        self.state = ServerState()
        self._on_change = on_change
        self._start_timeout_s = start_timeout_s
        self._list_timeout_s = list_timeout_s
        self._client: Client | None = None
        self._lost: anyio.Event | None = None
        self._lost_because: str | None = None
        self._changed: anyio.Event | None = None

    @property
    def name(self) -> str:
        return self.config.name

    # --- the supervisor ---------------------------------------------------------------

    async def run(self) -> None:
        """Keep the server's session up until cancelled."""
        while True:
            async for attempt in mcp_restart_policy(what=f"MCP server {self.name!r}"):
                with attempt:
                    await self._serve_once()
            # The session was healthy for a while before it was lost: a fresh backoff.

    async def _serve_once(self) -> None:
        """One session from start to loss; McpServerDown unless it was up for STABLE_S."""
        self._lost, self._changed = anyio.Event(), anyio.Event()
        self._lost_because = None
        up_at: float | None = None
        error: str | None = None
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch_start, group.cancel_scope)
                async with Client(self._transport(), message_handler=self._on_message,
                                  cache=None) as client:
                    await self._list_tools(client)
                    self._client, up_at = client, time.monotonic()
                    log.info("MCP server %r is up with %d tool(s)", self.name, len(self.state.tools))
                    group.start_soon(self._relist_on_change, client)
                    group.start_soon(self._listen, client)
                    await self._lost.wait()
                group.cancel_scope.cancel()
        except Exception as exc:  # noqa: BLE001 - whatever ended the session, restart it
            error = _describe(exc)
        finally:
            self._client = None
        if up_at is None:
            error = error or f"did not answer within {self._start_timeout_s:g} s"
        else:
            error = error or self._lost_because or "the connection was lost"
        if self._set(ServerState(up=False, error=error, tools=self.state.tools)):
            log.warning("MCP server %r is down: %s", self.name, error)
        if up_at is None or time.monotonic() - up_at < STABLE_S:
            raise McpServerDown(error)

    async def _watch_start(self, scope: anyio.CancelScope) -> None:
        await anyio.sleep(self._start_timeout_s)
        if self._client is None:
            scope.cancel()

    def _transport(self) -> Transport:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(command=config.command, args=list(config.args),
                                           env=dict(config.env) or None)
            return _ending_noticed(stdio_client(params), self._notice_lost)
        http = httpx2.AsyncClient(headers=dict(config.headers), timeout=HTTP_TIMEOUT)
        return _closing(http, streamable_http_client(str(config.url), http_client=http))

    def _notice_lost(self, because: str | None = None) -> None:
        if self._lost is not None:
            self._lost_because = self._lost_because or because
            self._lost.set()

    async def _listen(self, client: Client) -> None:
        """Ask a 2026-07-28 server for its change notifications; its stream's end is the
        session's. An older server sends them unasked."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    pass  # the notification reaches _on_message too, which lists again
        except ListenNotSupportedError:
            return
        except MCPError as exc:
            if exc.error.code != types.CONNECTION_CLOSED:
                log.info("MCP server %r offers no change notifications: %s", self.name, exc)
                return
        except SubscriptionLost:
            pass
        self._notice_lost()

    async def _on_message(self, message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._changed is not None:
            self._changed.set()

    async def _relist_on_change(self, client: Client) -> None:
        while True:
            assert self._changed is not None
            await self._changed.wait()
            self._changed = anyio.Event()
            try:
                with anyio.fail_after(self._list_timeout_s):
                    await self._list_tools(client)
                log.info("MCP server %r changed its tools: %s", self.name,
                         ", ".join(t.name for t in self.state.tools))
            except TimeoutError:  # hung: down until it answers again, as if unreachable
                self._notice_lost(f"did not list its tools within {self._list_timeout_s:g} s")
                return
            except Exception as exc:  # noqa: BLE001 - the session's loss is noticed elsewhere
                log.warning("MCP server %r: listing its tools failed: %s", self.name, _describe(exc))

    async def _list_tools(self, client: Client) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._set(ServerState(up=True, error=None, tools=tuple(tools)))

    def _set(self, state: ServerState) -> bool:
        """Take `state`; whether it differs from the last one (then listeners hear of it)."""
        changed = (state.up, state.error, state.tools) != (self.state.up, self.state.error, self.state.tools)
        self.state = state
        if changed:
            self._on_change()
        return changed

    # --- calls ------------------------------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any], *,
                   idempotency_key: str | None = None) -> str:
        """The text of one tool call's result; ToolError, in words for the model, if it
        failed or the server could not be reached. The idempotency key goes in the
        request's `_meta` (README, MCP servers)."""
        client = self._client
        if client is None:
            raise ToolError(
                f"The MCP server '{self.name}' is not running ({self.state.error}); it is being "
                "started again. Try again later, or use another tool."
            )
        try:
            meta = None if idempotency_key is None else {IDEMPOTENCY_META_KEY: idempotency_key}
            result = await client.call_tool(tool, dict(arguments), meta=meta)
        except MCPError as exc:
            if exc.error.code != types.CONNECTION_CLOSED:
                raise ToolError(f"The MCP server '{self.name}' refused the call: {exc.error.message}") from None
            self._notice_lost()
            raise ToolError(
                f"The MCP server '{self.name}' closed the connection during the call (it may have "
                "crashed); it is being started again. Try again later, or use another tool."
            ) from None
        except _TRANSPORT_ERRORS as exc:
            self._notice_lost()
            raise ToolError(
                f"The MCP server '{self.name}' could not be reached: {_describe(exc)}. "
                "Try again later, or use another tool."
            ) from None
        except Exception as exc:  # noqa: BLE001 - e.g. a result that does not parse
            raise ToolError(
                f"The call to the MCP server '{self.name}' failed: {_describe(exc)}. "
                "Try again, or use another tool."
            ) from None
        text = result_text(result)
        if result.is_error:
            raise ToolError(f"The tool reported an error: {text or '(no message)'}")
        return text


def result_text(result: types.CallToolResult) -> str:
    """A result as the observation: its text content, else its structured content as JSON."""
    parts = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    if not any(isinstance(b, types.TextContent) for b in result.content) and result.structured_content:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    """One line for an error, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    if isinstance(exc, FileNotFoundError):
        return f"cannot start it: {exc.strerror}: {exc.filename}"
    return f"{type(exc).__name__}: {first_line(exc)}" if str(exc) else type(exc).__name__


@asynccontextmanager
async def _ending_noticed(transport: Transport, notice: Callable[[], None]) -> AsyncIterator[Any]:
    """`transport`, whose read stream calls `notice` when it ends (a stdio server exited)."""
    async with transport as (read, write):
        yield _EndNoticed(read, notice), write


@asynccontextmanager
async def _closing(http: httpx2.AsyncClient, transport: Transport) -> AsyncIterator[Any]:
    """`transport`, then the HTTP client it was given closed."""
    async with http, transport as streams:
        yield streams


class _EndNoticed:
    """A read stream that says when it ends; the session reads it as it would the stream."""

    def __init__(self, stream: Any, notice: Callable[[], None]) -> None:
        self._stream = stream
        self._notice = notice

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._notice()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
