"""The MCP server's ASGI app: the official SDK's Streamable HTTP transport at `/mcp`.

`create_app(settings)` builds everything when it is called, never at import time. The
SDK's low-level `Server` serves both of MCP's eras: the handshake sessions (2025
revisions: a cancel is `notifications/cancelled`) and the single-exchange requests of
2026-07-28 (a cancel is the request's stream closed); both cancel the handler, and
the handler's cancellation cancels the agent (`mcp_server.calls`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

import anyio.abc
import anyio.to_thread
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from jarvis_agents import __version__, tracing
from jarvis_agents.assistants import NAME
from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable, JarvisError, NotFound
from jarvis_agents.lifecycle import Agent
from jarvis_agents.service import CreateRequest
from mcp_server.auth import KeyVerifier, RequireKey, caller_id
from mcp_server.calls import TICK_S, AgentCalls
from mcp_server.tools import INPUT_SCHEMA, create_fields, error_result, result_of, tool_of
from mcp_server.wiring import Components, build

log = logging.getLogger(__name__)

INSTRUCTIONS = ("Each tool is one of your assistants: call it with a goal and it runs an agent "
                "to its final answer. To ask a follow-up, pass the thread_id that the result's "
                "_meta gave.")


def create_app(settings: Settings | None = None, *, components: Components | None = None) -> Starlette:
    """The app: `/mcp` (Streamable HTTP, an API key as Bearer) and `/healthz`."""
    parts = components or build(settings or Settings.from_env())
    handlers = Handlers(parts)
    server = Server(
        "jarvis-agents", version=__version__, instructions=INSTRUCTIONS,
        on_list_tools=handlers.list_tools, on_call_tool=handlers.call_tool,
        # Every tool takes the same input: no tools/list per call to check its headers.
        get_tool_input_schema=lambda _name: INPUT_SCHEMA,
    )
    if not tracing.enabled():
        # The SDK's span per message, which records nothing without an exporter, costs the
        # calls CPU all the same (README, Tracing: off unless OTEL_EXPORTER_OTLP_ENDPOINT).
        server.middleware = []
    # Stateful handshake sessions, each bound to the key that opened it; no DNS-rebinding
    # check (the SDK's is for unauthenticated local servers: every request here needs a key).
    manager = StreamableHTTPSessionManager(app=server)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            async with manager.run():
                yield
        finally:
            await anyio.to_thread.run_sync(parts.close)

    return Starlette(
        routes=[
            Route("/mcp", endpoint=RequireKey(StreamableHTTPASGIApp(manager)),
                  methods=["GET", "POST", "DELETE"]),
            Route("/healthz", endpoint=healthz, methods=["GET"]),
        ],
        middleware=[Middleware(AuthenticationMiddleware,
                               backend=BearerAuthBackend(KeyVerifier(parts.keys)))],
        lifespan=lifespan,
    )


async def healthz(_request: Request) -> JSONResponse:
    """Liveness: the process answers (README, Health checks)."""
    return JSONResponse({"status": "ok"})


class Handlers:
    """`tools/list` and `tools/call`, for the user the request's key belongs to."""

    def __init__(self, parts: Components) -> None:
        self.service = parts.service
        self.calls = AgentCalls(parts.service)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        user_id = caller_id(_user(ctx))
        assistants = await anyio.to_thread.run_sync(self.service.assistants.list, user_id)
        return types.ListToolsResult(
            tools=[tool_of(a, protocol_version=ctx.protocol_version) for a in assistants])

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        user_id = caller_id(_user(ctx))
        if not NAME.match(params.name):
            raise _unknown_tool(params.name)
        try:
            request = CreateRequest(assistant=params.name, **create_fields(params.arguments or {}))
        except ValueError as exc:
            return error_result(str(exc))

        async def progress(value: float, message: str) -> None:
            await ctx.session.report_progress(value, None, message)

        try:
            run = self.calls.run(user_id, request,
                                 progress=progress if _wants_progress(ctx) else None)
            agent = await _unless_dropped(ctx, run)
        except NotFound as exc:
            if exc.code == "assistant_not_found":
                raise _unknown_tool(params.name) from None
            return error_result(str(exc))
        except JarvisError as exc:  # refused (a busy thread, too many agents), or Redis away
            return error_result(str(exc))
        except (SQLAlchemyError, RedisError) as exc:  # as the API's 503
            log.warning("a dependency was unavailable during an MCP call: %s", exc)
            name = "the database" if isinstance(exc, SQLAlchemyError) else "Redis"
            return error_result(f"{name} is unreachable right now; retry shortly")
        return result_of(agent, protocol_version=ctx.protocol_version)


async def _unless_dropped(ctx: ServerRequestContext[Any, Any], run: Awaitable[Agent]) -> Agent:
    """`run`, cancelled if the request that carried the call is dropped by its client.

    The 2026-07-28 transport cancels a call whose request is dropped by itself; a handshake
    session's call runs in the session's task, which its request's connection does not
    stop: there the request is looked at every tick, and a dropped one cancels the call
    (and so its agent) as `notifications/cancelled` does.
    """
    request = ctx.request
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not isinstance(request, Request):
        return await run
    answer: list[Agent] = []

    async def call(group: anyio.abc.TaskGroup) -> None:
        answer.append(await run)
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(call, group)
        while not await request.is_disconnected():
            await anyio.sleep(TICK_S)
        log.info("an MCP call's request was dropped by its client: the call is cancelled")
        group.cancel_scope.cancel()
    if not answer:
        raise DependencyUnavailable("the request was dropped: the call was cancelled")
    return answer[0]


def _wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request carries a progress token (its params as they came)."""
    meta = (ctx.params or {}).get("_meta")
    return isinstance(meta, dict) and meta.get("progressToken") is not None


def _user(ctx: ServerRequestContext[Any, Any]) -> Any:
    request = ctx.request
    return request.scope.get("user") if isinstance(request, Request) else None


def _unknown_tool(name: str) -> MCPError:
    return MCPError(INVALID_PARAMS, f"you have no assistant {name[:80]!r}; tools/list lists yours")
