"""`jarvis-agents mcp`: the MCP server alone, an ASGI app under uvicorn.

Why a process of its own rather than a part of the API: the SDK's transport is
asyncio (Starlette, anyio), the API is one gevent worker; README, MCP server, has the
measurements. One process holds thousands of calls in flight: each waits on the
event hub in a thread of its own (mcp_server/calls.py), not on a worker slot.
"""

from __future__ import annotations

import gc
import logging
import socket
import sys
import threading
from types import FrameType
from typing import Any

import uvicorn

from jarvis_agents.components import check_dependencies, check_port, freeze_start_up_objects
from jarvis_agents.config import Settings
from jarvis_agents.logs import configure_logging

# How long in-flight calls get to answer at a stop: their follows have ended by then
# (`McpServer.handle_exit`), so each answers at once that the server is stopping.
GRACEFUL_S = 10


def serve(settings: Settings, *, host: str, port: int) -> None:
    """Run the MCP server in the foreground until Ctrl-C or SIGTERM."""
    configure_logging(json_lines=settings.log_json, level=logging.WARNING)
    for name in ("mcp_server", "jarvis_agents"):
        logging.getLogger(name).setLevel(logging.INFO)
    check_dependencies(settings)
    check_port(host, port)
    from mcp_server.app import create_app
    from mcp_server.wiring import build

    components = build(settings)
    config = uvicorn.Config(
        create_app(settings, components=components), host=host, port=port, lifespan="on",
        log_config=None,
        access_log=False, timeout_graceful_shutdown=GRACEFUL_S, timeout_keep_alive=5,
        backlog=2048, server_header=False,
    )
    display_host = f"[{host}]" if ":" in host else host
    server = McpServer(config, url=f"http://{display_host}:{port}/mcp",
                       on_exit=components.hub.close)
    server.run()


class McpServer(uvicorn.Server):
    """uvicorn's server, saying where it listens and ending the follows at a stop."""

    def __init__(self, config: uvicorn.Config, *, url: str, on_exit: Any) -> None:
        super().__init__(config)
        self.url = url
        self.on_exit = on_exit

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            freeze_start_up_objects()  # as the API does: no full collection walks them
            print(f"MCP server listening on {self.url}", flush=True)  # tests wait for it

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        gc.unfreeze()  # see freeze_start_up_objects

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # Calls in flight would otherwise hold the stop until they are cut, and a cut
        # call cancels its agent: ended now, each answers that the server is stopping.
        threading.Thread(target=self.on_exit, name="jarvis-mcp-stop", daemon=True).start()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `jarvis-agents mcp` instead")
