"""The whole system as `/metrics` and `/readyz` report it (docs/api.md §10), in one scrape.

From the database (jarvis_agents.health), at most every few seconds (api.scrape_cache)
and never from the steps: agents by status, and the PENDING ones by model with the
oldest's age. From Redis, at each scrape (a handful of round trips): the queue depth of each model, the
workers alive and which models they take (jarvis_agents.routing), and what the workers
counted (jarvis_agents.cluster_metrics). Read from the shared record rather than
counted in this process, the figures are right however many API and worker processes
there are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api.scrape_cache import ScrapeCache
from api.sse import DirectStreams
from jarvis_agents.cluster_metrics import EXPOSED, read_families
from jarvis_agents.events import EventHub
from jarvis_agents.health import DatabaseFigures
from jarvis_agents.lifecycle import AgentStatus, utcnow
from jarvis_agents.routing import QueueDirectory, WorkerAdvert, unserved

log = logging.getLogger(__name__)


class SystemFigures:
    """What both endpoints read: the cached database figures and the Redis directory."""

    def __init__(self, read_database: Callable[[], DatabaseFigures], redis_client: Any) -> None:
        self.database = ScrapeCache(read_database)
        self.directory = QueueDirectory(redis_client)
        self.redis = redis_client

    def unserved_warnings(self) -> list[str]:
        """A sentence per model with PENDING agents that no live worker takes (/readyz)."""
        workers = self.directory.workers()
        if any(worker.models is None for worker in workers):
            return []  # a worker that takes every model is alive: nothing is stranded
        return [
            f"agents of the model '{model}' are PENDING and no live worker takes that model: "
            f"start `jarvis-agents worker --models {model}` (or a worker without --models)"
            for model in unserved(self.database.get().pending, workers)
        ]


class SystemCollector(Collector):
    def __init__(self, figures: SystemFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "jarvis_metrics_source_up", "Whether a metrics source answered this scrape.",
            labels=["source"],
        )
        database: DatabaseFigures | None = None
        try:
            database = self.figures.database.get()
            yield from self._database(database)
            up.add_metric(["database"], 1)
        except Exception as exc:  # noqa: BLE001 - a scrape reports what it can
            log.warning("metrics: database unavailable: %s", exc)
            up.add_metric(["database"], 0)
        try:
            yield from self._redis(database)
            up.add_metric(["redis"], 1)
        except Exception as exc:  # noqa: BLE001
            log.warning("metrics: Redis unavailable: %s", exc)
            up.add_metric(["redis"], 0)
        yield up

    def _database(self, figures: DatabaseFigures) -> Iterator[Metric]:
        agents = GaugeMetricFamily("jarvis_agents", "Agents by status.", labels=["status"])
        for status in AgentStatus:
            agents.add_metric([status.value], float(figures.by_status.get(status.value, 0)))
        age = GaugeMetricFamily(
            "jarvis_oldest_pending_age_seconds",
            "Age of the oldest PENDING agent of each model with PENDING agents.", labels=["model"],
        )
        now = utcnow()
        for model, (_, oldest) in sorted(figures.pending.items()):
            age.add_metric([model], max(0.0, (now - oldest).total_seconds()))
        failed = GaugeMetricFamily("jarvis_agents_failed", "FAILED agents by stop reason.",
                                   labels=["stop_reason"])
        for reason, count in sorted(figures.failed.items()):
            failed.add_metric([reason], float(count))
        kept = GaugeMetricFamily(
            "jarvis_retention_oldest_ended_age_seconds",
            "Age of the oldest ended agent still stored (JARVIS_RETENTION deletes it in time); "
            "0 when there is none.")
        kept.add_metric([], max(0.0, (now - figures.oldest_ended).total_seconds())
                        if figures.oldest_ended else 0.0)
        yield from (agents, age, failed, kept)

    def _redis(self, database: DatabaseFigures | None) -> Iterator[Metric]:
        directory = self.figures.directory
        depths, workers = directory.depths(), directory.workers()
        families = list(read_families(self.figures.redis))  # read them all before yielding any
        depth = GaugeMetricFamily(
            "jarvis_queue_depth", "Agent runs waiting on the queue of each model.", labels=["model"])
        for model, count in sorted(depths.items()):
            depth.add_metric([model], float(count))
        yield depth
        yield GaugeMetricFamily("jarvis_workers_alive", "Worker processes alive.",
                                value=float(len(workers)))
        running = GaugeMetricFamily(
            "jarvis_worker_running", "Agents each live worker runs now; `models` is what it "
            "takes (empty: every model).", labels=["worker", "models"])
        for worker in workers:
            running.add_metric([worker.name, ",".join(worker.models or ())], float(worker.running))
        yield running
        if database is not None:
            yield _stranded(database, workers)
        yield from families


def _stranded(database: DatabaseFigures, workers: list[WorkerAdvert]) -> Metric:
    stranded = GaugeMetricFamily(
        "jarvis_unserved_pending_agents",
        "PENDING agents of a model that no live worker takes.", labels=["model"])
    for model in unserved(database.pending, workers):
        stranded.add_metric([model], float(database.pending[model][0]))
    return stranded


class StreamCollector(Collector):
    """The event streams open in this API process."""

    def __init__(self, hub: EventHub, direct: DirectStreams) -> None:
        self.hub = hub
        self.direct = direct

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "jarvis_api_open_streams", "SSE streams and long-polls open in this API process.",
            value=float(self.hub.subscriber_count()),
        )
        yield GaugeMetricFamily(
            "jarvis_api_event_hub_connected", "Whether this process receives live events.",
            value=1.0 if self.hub.connected else 0.0,
        )
        yield GaugeMetricFamily(
            "jarvis_api_direct_streams", "Open SSE streams whose live steps the event hub "
            "writes straight to their socket (api.sse.SocketWriter).",
            value=float(self.direct.count),
        )


class ProcessCollector(Collector):
    """This process's default registry (process and Python figures), minus the names
    the system's figures report: a name twice in one scrape is not valid exposition."""

    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            if family.name not in EXPOSED:
                yield family


def metrics_registry(
    figures: SystemFigures, hub: EventHub, direct: DirectStreams
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SystemCollector(figures))
    registry.register(StreamCollector(hub, direct))
    registry.register(ProcessCollector())
    return registry
