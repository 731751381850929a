"""Liveness, readiness and Prometheus metrics: the operator's endpoints, no API key."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, jsonify
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import text

from api.auth import public
from api.context import ctx
from api.scrape_cache import ScrapeCache
from jarvis_agents.config import Settings
from jarvis_agents.events import EventHub
from jarvis_agents.lifecycle import AgentStatus, utcnow
from jarvis_agents.llm.readiness import ModelReadiness, check_default_model, default_provider
from jarvis_agents.store.repository import Repository
from workers.celery_app import QUEUE

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)

CHECK_TIMEOUT_S = 3.0
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@bp.get("/healthz")
@public
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
@public
def readyz() -> Response:
    context = ctx()
    settings = context.settings
    model: list[ModelReadiness] = []  # filled by its check, if it answers in time
    provider = default_provider(settings)  # the check's name: "ollama" or "openai"
    checks = _run_parallel({
        "database": lambda: _check_database(context.repository),
        "redis": lambda: _check_redis(context.redis),
        provider: lambda: _check_model(settings, model),
    })
    checks[provider].setdefault("model", settings.model)
    checks[provider].setdefault("model_pulled", False)
    ready = all(check["ok"] for check in checks.values())
    body: dict[str, Any] = {"status": "ready" if ready else "unavailable", "checks": checks,
                            "warnings": [_not_served(found) for found in model
                                         if found.reachable and not found.available]}
    if context.settings.mcp_servers:
        # A server down costs its tools only: reported beside the checks, never a 503.
        body["mcp"] = context.tools.readiness()
    response = jsonify(body)
    response.status_code = 200 if ready else 503
    return response


@bp.get("/metrics")
@public
def metrics() -> Response:
    registry = ctx().metrics_registry
    body = generate_latest(registry) + generate_latest(REGISTRY)
    return Response(body, status=200, content_type=PROMETHEUS_TEXT)


# --- readiness checks ---------------------------------------------------------------


def _check_database(repository: Repository) -> dict[str, Any]:
    with repository.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return {"ok": True, "error": None}


def _check_redis(redis_client: Any) -> dict[str, Any]:
    redis_client.ping()
    return {"ok": True, "error": None}


def _check_model(settings: Settings, found: list[ModelReadiness]) -> dict[str, Any]:
    """The default model's server answers (required); whether it has the model (reported)."""
    readiness = check_default_model(settings, timeout_s=CHECK_TIMEOUT_S - 0.5)
    found.append(readiness)
    return {"ok": readiness.reachable, "error": readiness.error, "model": readiness.model,
            "model_pulled": readiness.available}


def _not_served(found: ModelReadiness) -> str:
    """The warning for a default model its server does not have: agents would fail."""
    if found.provider == "ollama":
        remedy = f"run `ollama pull {found.name}` there"
    else:
        remedy = "serve it there"
    return (f"the default model '{found.model}' is not on {found.server}: agents that do "
            f"not name another model will fail; {remedy}, or set JARVIS_MODEL to a model "
            "it has")


def _run_parallel(checks: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Run the checks at once: readiness answers in the time of the slowest, bounded."""
    results: dict[str, dict[str, Any]] = {}

    def run(name: str, check: Callable[[], dict[str, Any]]) -> None:
        try:
            results[name] = check()
        except Exception as exc:  # noqa: BLE001 - a failed check is the answer, not an error
            results[name] = {"ok": False, "error": _first_line(exc)}

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in checks.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    answer = {}
    for name in checks:
        answer[name] = results.get(name) or {"ok": False, "error": f"no answer within {CHECK_TIMEOUT_S:g} s"}
    return answer


def _first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__


# --- metrics ------------------------------------------------------------------------


@dataclass(frozen=True)
class DatabaseFigures:
    """What `/metrics` reports from the database: agents by status, the oldest PENDING one."""

    by_status: dict[str, int]
    oldest_pending: datetime | None

    @classmethod
    def read(cls, repository: Repository) -> DatabaseFigures:
        return cls(repository.status_counts(), repository.oldest_pending_created_at())


class DatabaseCollector(Collector):
    """Gauges from the database and the queue.

    Read from the shared record rather than counted in this process, they are right
    however many API and worker processes there are. The database's figures are read
    at most every few seconds, whatever the scrape rate (api.scrape_cache), and never
    from the steps: their number grows without bound.
    """

    def __init__(self, repository: Repository, redis_client: Any) -> None:
        self.figures = ScrapeCache(lambda: DatabaseFigures.read(repository))
        self.redis = redis_client

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "jarvis_metrics_source_up", "Whether a metrics source answered this scrape.",
            labels=["source"],
        )
        try:
            yield from self._database(self.figures.get())
            up.add_metric(["database"], 1)
        except Exception as exc:  # noqa: BLE001 - a scrape reports what it can
            log.warning("metrics: database unavailable: %s", exc)
            up.add_metric(["database"], 0)
        try:
            depth = GaugeMetricFamily(
                "jarvis_queue_depth", "Agent runs waiting on the Celery queue.", labels=["queue"]
            )
            depth.add_metric([QUEUE], float(self.redis.llen(QUEUE)))
            yield depth
            up.add_metric(["redis"], 1)
        except Exception as exc:  # noqa: BLE001
            log.warning("metrics: Redis unavailable: %s", exc)
            up.add_metric(["redis"], 0)
        yield up

    def _database(self, figures: DatabaseFigures) -> Iterator[GaugeMetricFamily]:
        agents = GaugeMetricFamily("jarvis_agents", "Agents by status.", labels=["status"])
        for status in AgentStatus:
            agents.add_metric([status.value], float(figures.by_status.get(status.value, 0)))
        age = GaugeMetricFamily(
            "jarvis_oldest_pending_age_seconds",
            "Age of the oldest PENDING agent (0 when there is none).",
        )
        oldest = figures.oldest_pending
        age.add_metric([], max(0.0, (utcnow() - oldest).total_seconds()) if oldest else 0.0)
        yield from (agents, age)


class StreamCollector(Collector):
    """The event streams open in this API process."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "jarvis_api_open_streams", "SSE streams and long-polls open in this API process.",
            value=float(self.hub.subscriber_count()),
        )
        yield GaugeMetricFamily(
            "jarvis_api_event_hub_connected", "Whether this process receives live events.",
            value=1.0 if self.hub.connected else 0.0,
        )


def metrics_registry(repository: Repository, redis_client: Any, hub: EventHub) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(repository, redis_client))
    registry.register(StreamCollector(hub))
    return registry
