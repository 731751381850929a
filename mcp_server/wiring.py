"""What the MCP process holds: the core's service and the keys' lookup, built from Settings.

The same pieces the API builds (api/__init__.py): the agent service over the
repository, the queue and the event bus, its subscriptions through one event hub
per process. Nothing here speaks HTTP: it is the core's side of this door.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from jarvis_agents.accounts import ApiKeys
from jarvis_agents.config import Settings
from jarvis_agents.events import EventHub
from jarvis_agents.service import AgentService

log = logging.getLogger(__name__)


@dataclass
class Components:
    settings: Settings
    service: AgentService
    keys: ApiKeys
    hub: EventHub
    closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        """End the follows (the hub) and release the connections, at process exit."""
        self.hub.close()
        for close in reversed(self.closers):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - best effort at exit
                log.debug("closing %s failed: %s", close, exc)


def build(settings: Settings) -> Components:
    """Connect to the database, Redis and the queue as the API does."""
    from jarvis_agents import tracing
    from jarvis_agents.components import redis_client
    from jarvis_agents.events import RedisEventBus, ended_agents
    from jarvis_agents.llm.readiness import KnownModels
    from jarvis_agents.routing import QueueDirectory
    from jarvis_agents.store import open_repository
    from jarvis_agents.tools.mcp.published import PublishedTools
    from jarvis_agents.tools.registry import ToolRegistry
    from jarvis_agents.webhooks.addresses import check_webhook_url
    from workers.celery_app import CeleryDispatcher, create_celery
    from workers.tracing import traced_dispatcher

    tracing.configure(settings, service="jarvis-agents-mcp")
    with ToolRegistry.default(settings) as registry:
        own_tools = registry.describe()
    redis = redis_client(settings, max_connections=200)
    repository = open_repository(settings, pool_size=20)
    known_models = KnownModels.from_settings(settings)
    celery = create_celery(settings)
    closers: list[Any] = [redis.close, repository.engine.dispose, known_models.close, celery.close,
                          tracing.flush]
    # The follows' one pub/sub connection; its status check catches a lost terminal publish.
    hub = EventHub(redis, read_ended=ended_agents(repository))
    service = AgentService(
        repository=repository,
        settings=settings,
        dispatcher=traced_dispatcher(CeleryDispatcher(
            celery, directory=QueueDirectory(redis, idle_s=settings.model_idle_s))),
        events=RedisEventBus(redis, hub=hub),
        tool_names=PublishedTools(redis, static=own_tools, servers=settings.mcp_servers),
        webhook_check=lambda url: check_webhook_url(url, settings),
        model_check=known_models.check,
    )
    return Components(settings=settings, service=service, keys=ApiKeys(repository.users), hub=hub,
                      closers=closers)
