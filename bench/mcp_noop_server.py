"""An MCP server with one tool that does nothing, over stdio: what `bench.mcp_calls` calls."""

from __future__ import annotations

from mcp.server import MCPServer

server = MCPServer("bench")


@server.tool()
def noop() -> str:
    """Do nothing, at once."""
    return "ok"


if __name__ == "__main__":
    server.run()
