"""The composition root: builds the real pieces from Settings, for the doors to use.

Nothing here runs at import time; each door (API, worker, CLI) calls one builder.
"""

from __future__ import annotations

import errno
import gc
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jarvis_agents.config import Settings
from jarvis_agents.errors import ConfigError, DependencyUnavailable
from jarvis_agents.events import RedisEventBus
from jarvis_agents.redaction import redacted_url
from jarvis_agents.store import open_repository
from jarvis_agents.store.repository import Repository

if TYPE_CHECKING:
    from collections.abc import Callable

    from jarvis_agents.cluster_metrics import ClusterMetrics, ClusterTimings
    from jarvis_agents.dispatch import Dispatcher
    from jarvis_agents.llm.router import ModelRouter
    from jarvis_agents.model_slots import ModelSlots
    from jarvis_agents.runner import AgentRunner
    from jarvis_agents.scheduler import Scheduler
    from jarvis_agents.tools.registry import ToolRegistry
    from jarvis_agents.webhooks.dispatcher import WebhookDispatcher


def redis_client(settings: Settings, *, max_connections: int = 50) -> Any:
    """A Redis client with bounded waits: no call blocks forever."""
    import redis

    return redis.Redis.from_url(
        settings.require_redis_url(),
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=10,
        retry_on_timeout=True,
        max_connections=max_connections,
    )


def freeze_start_up_objects() -> None:
    """Take what exists once a process is up (modules, the app, its pools: most of the
    objects in the API) out of the garbage collector's sight. A full collection walked
    them all while every request or agent in the process waited, which showed as the
    tail of the create latency (BENCHMARKS.md). Start-up's garbage is collected first,
    not frozen with the rest.
    Undo with `gc.unfreeze()` before exiting: the interpreter's teardown would find them
    only once modules are half gone, and logging's weakref callbacks print tracebacks."""
    gc.collect()
    gc.freeze()


def check_dependencies(settings: Settings) -> None:
    """Fail fast, in one line, on what a restart cannot fix: config, schema, Redis."""
    import redis

    repository = open_repository(settings, pool_size=1)
    repository.engine.dispose()
    client = redis_client(settings, max_connections=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        where = redacted_url(settings.redis_url or "")  # a command's error lands in logs
        raise DependencyUnavailable(f"cannot reach Redis at {where}: {exc}") from None
    finally:
        client.close()


def check_port(host: str, port: int) -> None:
    """Fail in one line if nothing could listen on `host`:`port` (taken, or not ours)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the server binds: a port whose old connections linger (TIME_WAIT) is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"port {port} on {host} is already in use") from None
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@dataclass
class WorkerComponents:
    settings: Settings
    repository: Repository
    tools: ToolRegistry
    runner: AgentRunner
    webhooks: WebhookDispatcher | None  # None without JARVIS_WEBHOOK_SECRET
    redis: Any
    metrics: ClusterMetrics
    slots: ModelSlots | None  # None without JARVIS_MODEL_CONCURRENCY
    router: ModelRouter
    timings: ClusterTimings

    def forget_model(self, model: str) -> None:
        """Drop what this process keeps of a model no longer in use (README, Routing by
        model and caps): the mode its agents settled on, what its server said it can do,
        its metric series."""
        self.runner.executor.forget(model)
        self.router.forget(model)
        self.timings.forget(model)

    def start_background(self) -> None:
        """The runner's threads, the webhook dispatcher's, the metrics' flush and the
        model slots' upkeep."""
        self.metrics.start()
        if self.slots is not None:
            self.slots.start()
        self.runner.start_background(redis_client=self.redis)
        if self.webhooks is not None:
            self.webhooks.start()

    def close(self) -> None:
        self.runner.stop_background()
        if self.webhooks is not None:
            self.webhooks.stop()
        if self.slots is not None:
            self.slots.stop()
        self.metrics.stop()
        self.tools.close()
        self.repository.engine.dispose()
        self.redis.close()


def langgraph_queue(repository: Repository, settings: Settings, dispatcher: Dispatcher,
                    events: Any) -> Any:
    """The duty that starts LangGraph runs enqueued behind a thread's active one once
    their turn has come (jarvis_agents/langgraph/runs.py)."""
    from jarvis_agents.langgraph import LangGraph
    from jarvis_agents.service import AgentService

    agents = AgentService(repository=repository, settings=settings, dispatcher=dispatcher,
                          events=events, tool_names=())
    return LangGraph.of(agents).runs.start_due


def build_worker(settings: Settings, dispatcher: Dispatcher) -> WorkerComponents:
    """A worker's pieces."""
    from jarvis_agents import tracing
    from jarvis_agents.approvals import ApprovalGate
    from jarvis_agents.cluster_metrics import ClusterMetrics, ClusterTimings
    from jarvis_agents.delegation import Delegation
    from jarvis_agents.executor import Executor, Limits
    from jarvis_agents.llm.governed import GovernedModel
    from jarvis_agents.llm.router import ModelRouter, split_model
    from jarvis_agents.metrics import PrometheusTimings
    from jarvis_agents.model_slots import ModelSlots
    from jarvis_agents.runner import AgentRunner
    from jarvis_agents.store.outages import OutageTolerantStore
    from jarvis_agents.tools.mcp.worker import worker_registry
    from jarvis_agents.webhooks.dispatcher import WebhookDispatcher

    # Statements are short beside a model call: 20 connections serve 200 agents, and a
    # worker process stays within 21 of PostgreSQL's default max_connections of 100
    # (the step writes have one of their own, see store/postgres.py).
    # A fixed pool: with overflow, 200 threads kept opening connections beyond it and
    # closing them as they came back (each a PostgreSQL backend: a process forked and
    # warmed up), for no throughput that could be measured.
    repository = open_repository(
        settings, pool_size=min(20, settings.worker_concurrency // 4 + 5), overflow=False)
    redis = redis_client(settings, max_connections=settings.worker_concurrency + 20)
    events = RedisEventBus(redis)
    tools = worker_registry(settings, redis)  # MCP servers started, their tools published
    metrics = ClusterMetrics(redis)  # what the API's /metrics reports of this worker
    slots = ModelSlots(redis, dict(settings.model_concurrency)) if settings.model_concurrency else None

    # An agent's own database calls ride out a database restart (store/outages.py).
    store = OutageTolerantStore(repository, budget_s=settings.outage_budget_s)
    # With tracing on, the model's and the tools' calls and each attempt are spans.
    router = ModelRouter.from_settings(settings)
    timings = ClusterTimings(PrometheusTimings(), metrics)
    executor = tracing.traced_executor(Executor(
        store=store,
        model=tracing.traced_model(
            GovernedModel(router, slots=slots, metrics=metrics),
            provider_of=lambda model: split_model(model, default_provider=router.default_provider)),
        tools=tracing.traced_tools(tools),
        events=events,
        limits=Limits(step_timeout_s=settings.step_timeout_s, total_timeout_s=settings.total_timeout_s),
        approvals=ApprovalGate(settings.approve_tools),
        timings=timings,
        delegation=Delegation(repository=repository, settings=settings, dispatcher=dispatcher,
                              events=events),
    ))
    runner = AgentRunner(
        repository=repository, store=store, executor=executor, events=events,
        dispatcher=dispatcher, settings=settings,
        duties=(langgraph_queue(repository, settings, dispatcher, events),
                *retention_duties(repository, settings, metrics)),
    )
    webhooks = WebhookDispatcher.from_settings(
        repository, settings,
        outcomes=lambda outcome: metrics.inc("jarvis_webhook_deliveries", outcome))
    return WorkerComponents(settings, repository, tools, runner, webhooks, redis, metrics, slots,
                            router, timings)


@dataclass
class SchedulerComponents:
    """The firing loop of a worker's supervisor process (jarvis_agents/scheduler.py), with
    what it holds: its own process, so that a thousand agents' threads in the Celery
    process do not starve it of the interpreter."""

    scheduler: Scheduler
    metrics: ClusterMetrics
    repository: Repository
    redis: Any

    def start(self) -> None:
        self.metrics.start()
        self.scheduler.start()

    def close(self) -> None:
        self.scheduler.stop()
        self.metrics.stop()
        self.repository.engine.dispose()
        self.redis.close()


def build_scheduler(settings: Settings,
                    dispatcher_for: Callable[[Any], Dispatcher]) -> SchedulerComponents:
    """The firing loop's pieces; `dispatcher_for(redis)` is the queue its agents go on."""
    from jarvis_agents.cluster_metrics import ClusterMetrics
    from jarvis_agents.scheduler import Scheduler
    from jarvis_agents.service import AgentService
    from jarvis_agents.tools.mcp.published import PublishedTools
    from jarvis_agents.tools.registry import ToolRegistry

    repository = open_repository(settings, pool_size=4, overflow=False)
    redis = redis_client(settings, max_connections=20)  # the announcers' and the metrics'

    metrics = ClusterMetrics(redis)
    with ToolRegistry.default(settings) as registry:
        own_tools = registry.describe()  # MCP tools as the workers publish them
    service = AgentService(
        repository=repository, settings=settings, dispatcher=dispatcher_for(redis),
        events=RedisEventBus(redis),
        tool_names=PublishedTools(redis, static=own_tools, servers=settings.mcp_servers))
    scheduler = Scheduler(service, outcome=lambda outcome, lag_s: scheduled(metrics, outcome, lag_s))
    return SchedulerComponents(scheduler, metrics, repository, redis)


def scheduled(metrics: ClusterMetrics, outcome: str, lag_s: float) -> None:
    """Count a schedule's due time (fired or skipped), and how late a fired one was."""
    metrics.inc("jarvis_schedule_firings", outcome)
    if outcome == "fired":
        metrics.observe("jarvis_schedule_lag_seconds", seconds=lag_s)


def retention_duties(
    repository: Repository, settings: Settings, metrics: ClusterMetrics,
) -> tuple[Callable[[], object], ...]:
    """JARVIS_RETENTION's sweep, run after each of the worker's sweeps, its deletions
    counted for the API's /metrics; none when it is unset."""
    from jarvis_agents.retention import Deleted, Retention

    def record(deleted: Deleted) -> None:
        for kind, rows in deleted.by_kind().items():
            if rows:
                metrics.inc("jarvis_retention_deleted", kind, amount=rows)

    if settings.retention_s is None:
        return ()
    return (Retention(repository.deletions, retention_s=settings.retention_s, record=record).sweep,)
