"""Real MCP servers for the tests, written with the official SDK (`mcp.server.MCPServer`).

    python -m tests.support.mcp_servers KIND            # over stdio
    python -m tests.support.mcp_servers KIND --http PORT  # Streamable HTTP at /mcp

KIND is one of:
- `calc`: add(a, b), echo(text), noop(), fail() (an error result), big() (long output);
- `crashy`: echo(text), and explode(), which kills the server in the middle of the call;
- `slow`: sleep(seconds), which answers after that long; it writes `started` to the
  file $MCP_MARKER as it begins and `cancelled` when its call is cancelled, so a test
  can see the call under way and the request cancelled;
- `changing`: ping(), and grow(), which adds the tool `extra` and says the list changed;
- `ledger`: record(text), which appends the text and the idempotency key the call's `_meta`
  carried, as a JSON line, to the file $MCP_RECORD, then answers once the file $MCP_HOLD
  is gone (at once if unset);
- `stalling`: ping(), and stall(), after which the server says its list changed and never
  answers a list again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context


def calc() -> MCPServer:
    server = MCPServer("calc")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Repeat the text."""
        return text

    @server.tool()
    def noop() -> str:
        """Do nothing, at once."""
        return "ok"

    @server.tool()
    def fail() -> str:
        """Always fails."""
        raise ValueError("the disk is on fire")

    @server.tool()
    def big() -> str:
        """A very long answer."""
        return "x" * 50_000

    return server


def crashy() -> MCPServer:
    server = MCPServer("crashy")

    @server.tool()
    def echo(text: str) -> str:
        """Repeat the text."""
        return text

    @server.tool()
    def explode() -> str:
        """Kill the server in the middle of the call."""
        os._exit(7)

    return server


def slow() -> MCPServer:
    server = MCPServer("slow")

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Answer after `seconds`."""
        marker = os.environ.get("MCP_MARKER")
        if marker:
            Path(marker).write_text("started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if marker:
                Path(marker).write_text("cancelled")
            raise
        return f"slept {seconds:g} s"

    return server


def changing() -> MCPServer:
    server = MCPServer("changing")

    @server.tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `extra`, and say the list changed."""

        def extra(text: str) -> str:
            """A tool that was not there at first."""
            return f"extra: {text}"

        server.add_tool(extra, name="extra")
        await ctx.notify_tools_changed()
        return "grown"

    return server


IDEMPOTENCY_META_KEY = "jarvis/idempotency_key"


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(line + "\n")


def ledger() -> MCPServer:
    server = MCPServer("ledger")

    @server.tool()
    async def record(text: str, ctx: Context) -> str:
        """Write the text down in the ledger."""
        key = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY)
        if record_file := os.environ.get("MCP_RECORD"):
            await asyncio.to_thread(_append, Path(record_file), json.dumps({"text": text, "key": key}))
        hold = os.environ.get("MCP_HOLD")
        while hold and Path(hold).exists():
            await asyncio.sleep(0.05)
        return f"recorded: {text}"

    return server


class _Stalling(MCPServer):
    """A server whose list of tools hangs once `stalled`."""

    stalled = False

    async def list_tools(self) -> list[Any]:
        if self.stalled:
            await asyncio.Event().wait()  # never set: the list never comes
        return await super().list_tools()


def stalling() -> MCPServer:
    server = _Stalling("stalling")

    @server.tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    @server.tool()
    async def stall(ctx: Context) -> str:
        """Say the list changed, and never answer a list again."""
        server.stalled = True
        await ctx.notify_tools_changed()
        return "stalled"

    return server


KINDS = {"calc": calc, "crashy": crashy, "slow": slow, "changing": changing, "ledger": ledger,
         "stalling": stalling}


def main() -> None:
    parser = argparse.ArgumentParser(prog="tests.support.mcp_servers")
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    options = parser.parse_args()
    server = KINDS[options.kind]()
    if options.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.http)


if __name__ == "__main__":
    main()
