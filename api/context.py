"""What the views share: the core's services, the event hub, the stream slots."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import current_app

from api.scrape_cache import ScrapeCache
from api.sse import DirectStreams
from api.stream_slots import StreamSlots
from jarvis_agents.accounts import ApiKeys
from jarvis_agents.config import Settings
from jarvis_agents.events import EventHub
from jarvis_agents.health import Readiness
from jarvis_agents.service import AgentService
from jarvis_agents.tools.mcp.published import PublishedTools

if TYPE_CHECKING:
    from api.mcp_proxy import McpUpstream

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamTiming:
    """How often streams speak and look at the database while nothing happens."""

    keepalive_s: float = 10.0  # docs/api.md §4 asks for at least every 15 s
    # POST /stream must notice a closed socket within seconds; where the socket cannot
    # be watched, a write is the only way to find out.
    probe_s: float = 1.0
    recheck_s: float = 5.0  # the hub re-reads watched agents in case a terminal publish was lost
    tick_s: float = 0.5


@dataclass
class ApiContext:
    settings: Settings
    service: AgentService
    keys: ApiKeys
    readiness: ScrapeCache[Readiness]  # api.health.readiness_cache
    hub: EventHub
    tools: PublishedTools
    openapi: dict[str, Any]
    metrics_registry: Any
    stream_slots: StreamSlots
    mcp: McpUpstream  # where `/mcp` is forwarded (api.mcp_proxy)
    direct_streams: DirectStreams = field(default_factory=DirectStreams)
    # Whether the server frames a streamed body as HTTP/1.1 chunks that the hub may
    # write itself (api.sse.socket_writer); said by the gunicorn worker (api.server).
    server_chunks: bool = False
    timing: StreamTiming = field(default_factory=StreamTiming)
    closers: list[Any] = field(default_factory=list)
    shutting_down: bool = False

    def end_streams(self) -> None:
        """Tell every open stream to end (the server is stopping; clients reconnect)."""
        self.shutting_down = True
        self.hub.close()

    def close(self) -> None:
        """End the open streams and release connections (at process exit)."""
        self.end_streams()
        for close in self.closers:
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - best effort at exit
                log.debug("closing %s failed: %s", close, exc)


def ctx() -> ApiContext:
    return current_app.extensions["jarvis"]
