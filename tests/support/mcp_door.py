"""Our own MCP server (`jarvis-agents mcp`, the `mcp_server` door) for the tests, and the
official `mcp` client pointed at it with a user's API key.

    url = launch_mcp(env, log_path, started)          # a ready server; its /mcp URL
    result = run(call(url, key, "agent", {"goal": "…"}))
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Process, cli_env, free_port

T = TypeVar("T")


def launch_mcp(env: dict[str, str], log_path: Path, started: list[Process], *,
               port: int | None = None) -> str:
    """Start `jarvis-agents mcp` with `env` on `port` (a free one by default); its /mcp URL
    once it listens."""
    port = port or free_port()
    process = Process([sys.executable, "-m", "jarvis_agents.cli", "mcp", "--port", str(port)],
                      cli_env(**env), log_path)
    started.append(process)
    process.wait_for("MCP server listening on", timeout_s=60)
    return f"http://127.0.0.1:{port}/mcp"


# The SDK's SSE streams send a keep-alive every 15 s (sse-starlette's default): a client
# that waits READ_TIMEOUT_S for a byte is held by them alone while an agent runs longer,
# as three model calls of LONG_CALL_LATENCY_S each (with no progress asked) do.
READ_TIMEOUT_S = 18.0
LONG_CALL_LATENCY_S = 7.0


@asynccontextmanager
async def mcp_client(url: str, api_key: str, *, mode: str = "auto",
                     read_timeout_s: float = 60.0) -> AsyncIterator[Client]:
    """The official client, its HTTP requests carrying the key; `mode` "legacy" for the
    handshake sessions (a cancel is `notifications/cancelled`), "auto" for 2026-07-28
    (a cancel closes the request's stream)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api_key}"},
                              timeout=httpx2.Timeout(30.0, read=read_timeout_s))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a test's async part to its end."""
    return anyio.run(lambda: coroutine)
