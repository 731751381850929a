"""The Flask API: a thin HTTP door into `jarvis_agents.service`.

`create_app(settings)` builds everything from Settings when it is called — never at
import time — so a test, the `jarvis-agents api` server and a production gunicorn
each get their own app with their own connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Flask

from jarvis_agents.config import Settings
from jarvis_agents.service import AgentService

if TYPE_CHECKING:
    from jarvis_agents.events import EventHub

MAX_BODY_BYTES = 64 * 1024


def create_app(
    settings: Settings | None = None,
    *,
    service: AgentService | None = None,
    redis: Any | None = None,
    timing: Any | None = None,
) -> Flask:
    """The API app. `service` and `redis` replace the real ones (tests); `timing` the
    stream timings (`api.context.StreamTiming`)."""
    from api import (
        agents,
        assistants,
        auth,
        errors,
        health,
        openapi,
        params,
        schedules,
        streaming,
        system,
    )
    from api.a2a import bp as a2a_bp
    from api.context import ApiContext, StreamTiming
    from api.dashboard import dashboard
    from api.langgraph import KEY_HEADER as LANGGRAPH_KEY_HEADER
    from api.langgraph_stream import bp as langgraph_bp  # the blueprint, its streams included
    from api.mcp_proxy import McpUpstream, forward_url
    from api.mcp_proxy import bp as mcp_bp
    from api.sse import DirectStreams
    from api.stream_slots import StreamSlots
    from jarvis_agents import tracing
    from jarvis_agents.accounts import ApiKeys
    from jarvis_agents.components import redis_client
    from jarvis_agents.events import RedisEventBus
    from jarvis_agents.health import Health
    from jarvis_agents.llm.readiness import KnownModels
    from jarvis_agents.routing import QueueDirectory
    from jarvis_agents.store import open_repository
    from jarvis_agents.tools.mcp.published import PublishedTools
    from jarvis_agents.tools.registry import ToolRegistry
    from jarvis_agents.webhooks.addresses import check_webhook_url
    from workers.celery_app import CeleryDispatcher, create_celery
    from workers.tracing import traced_dispatcher

    settings = settings or Settings.from_env()
    traced = tracing.configure(settings, service="jarvis-agents-api")
    with ToolRegistry.default(settings) as registry:
        own_tools = registry.describe()
    closers: list[Any] = []
    if redis is None:
        # Streams share the event hub's one connection; this pool serves the publishes
        # of creates and cancels, and the health checks.
        redis = redis_client(settings, max_connections=200)
        closers.append(redis.close)
    # MCP tools are the ones the workers have and publish (jarvis_agents/tools/mcp/published.py).
    tools = PublishedTools(redis, static=own_tools, servers=settings.mcp_servers)
    timing = timing or StreamTiming()
    if service is None:
        repository = open_repository(settings, pool_size=20)
        closers.append(repository.engine.dispose)
        # The streams' hub is the bus's subscribe side: one pub/sub connection.
        hub = event_hub(redis, repository, timing)
        known_models = KnownModels.from_settings(settings)
        closers.append(known_models.close)
        directory = QueueDirectory(redis, idle_s=settings.model_idle_s)
        service = AgentService(
            repository=repository,
            settings=settings,
            dispatcher=traced_dispatcher(CeleryDispatcher(create_celery(settings), directory=directory)),
            events=RedisEventBus(redis, hub=hub),
            tool_names=tools,
            webhook_check=lambda url: check_webhook_url(url, settings),
            model_check=known_models.check,
        )
    else:
        hub = event_hub(redis, service.repository, timing)
    health_ = Health(settings=settings, store=service.repository, redis=redis, mcp=tools)
    figures = system.SystemFigures(health_.database_figures, redis)

    direct_streams = DirectStreams()
    mcp = McpUpstream(forward_url(settings))
    closers.append(mcp.close)
    # No app-wide static route: the dashboard serves its own few files.
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.json.sort_keys = False  # type: ignore[attr-defined] - keep the documented field order
    context = ApiContext(
        settings=settings, service=service, keys=ApiKeys(service.repository.users),
        readiness=health.readiness_cache(health_, figures.unserved_warnings),
        hub=hub, tools=tools, timing=timing, closers=closers,
        # Without MCP servers the tools are fixed, and the document can name them.
        openapi=openapi.build_openapi([] if settings.mcp_servers else tools.names()),
        metrics_registry=system.metrics_registry(figures, hub, direct_streams),
        stream_slots=StreamSlots(settings.max_streams_per_user), direct_streams=direct_streams,
        mcp=mcp,
    )
    app.extensions["jarvis"] = context

    app.url_map.converters["agent_id"] = params.AgentIdConverter
    errors.register_error_handlers(app)
    auth.install(app, context.keys, key_headers={langgraph_bp.name: LANGGRAPH_KEY_HEADER})
    for blueprint in (agents.bp, assistants.bp, schedules.bp, streaming.bp, health.bp, openapi.bp,
                      dashboard):
        app.register_blueprint(blueprint)
    app.register_blueprint(a2a_bp)
    app.register_blueprint(langgraph_bp)
    app.register_blueprint(mcp_bp)
    if traced:
        _instrument(app)
        closers.append(tracing.flush)
    return app


def _instrument(app: Flask) -> None:
    """A span per request (a create's is the root of its agent's trace), the probes and
    the scrapes left out."""
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    FlaskInstrumentor().instrument_app(app, excluded_urls="/healthz,/readyz,/metrics")


def event_hub(redis: Any, repository: Any, timing: Any) -> EventHub:
    """The process's one pub/sub connection for its streams; its status check reads the
    watched agents from `repository` every `timing.recheck_s`."""
    from jarvis_agents.events import EventHub, ended_agents

    return EventHub(redis, read_ended=ended_agents(repository), recheck_s=timing.recheck_s)
