"""The tools of a worker process: built-ins, plug-ins, and its MCP servers' tools."""

from __future__ import annotations

import logging
from typing import Any

from jarvis_agents.config import Settings
from jarvis_agents.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

# How long a starting worker waits for its MCP servers, so that its first agents see
# their tools; a server slower than that joins when it answers.
START_WAIT_S = 10.0


def worker_registry(settings: Settings, redis: Any) -> ToolRegistry:
    """The worker's registry; with MCP servers configured, they are started (the SDK
    loaded only then) and their tools published to Redis for the API. Closing the
    registry stops them."""
    if not settings.mcp_servers:
        return ToolRegistry.default(settings)
    from jarvis_agents.tools.mcp.provider import McpTools
    from jarvis_agents.tools.mcp.published import RedisPublisher

    mcp = McpTools(settings.mcp_servers, publisher=RedisPublisher(redis))
    if not mcp.wait_started(START_WAIT_S):
        log.warning("MCP servers still starting after %s s; their tools join when they answer",
                    START_WAIT_S)
    return ToolRegistry.default(settings, providers=[mcp])
