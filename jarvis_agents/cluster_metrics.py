"""Figures recorded in worker processes, summed in Redis for the API's one scrape (docs/api.md §10).

A Prometheus registry is per process, and workers run on other machines than the API,
so the API cannot read theirs. Each worker process keeps what it counts (counters, and
histograms as counters of buckets) in memory and adds it into one Redis hash,
`METRICS_KEY`, every few seconds (HINCRBYFLOAT: one round trip per flush, whatever the
number of agents). The API's `/metrics` reads that hash (one HGETALL) and reports the
sums: totals of the whole system that survive a worker's exit, at most a flush period
plus the API's cache old. A worker that dies loses what it had not flushed yet (a few
seconds of figures); a Redis restarted empty starts the totals again from zero, which
Prometheus takes for a counter reset.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

log = logging.getLogger(__name__)

METRICS_KEY = "jarvis:metrics"
FLUSH_S = 5.0
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(frozen=True)
class Spec:
    kind: str  # "counter" or "histogram"
    help: str
    labels: tuple[str, ...]


# Names as exposed (a counter's without its `_total`, as prometheus_client spells families).
SPECS: Mapping[str, Spec] = {
    "jarvis_planning_seconds": Spec(
        "histogram", "Time of one model call (planning), waiting for a slot not included.",
        ("model",)),
    "jarvis_model_wait_seconds": Spec(
        "histogram", "Time a model call waited for a slot under JARVIS_MODEL_CONCURRENCY.",
        ("model",)),
    "jarvis_model_tokens": Spec(
        "counter", "Tokens read (input) and written (output) by model calls.",
        ("model", "direction")),
    "jarvis_tool_seconds": Spec("histogram", "Time of one tool call.", ("tool",)),
    "jarvis_retention_deleted": Spec(
        "counter", "Rows the retention sweep deleted, by kind: agent, step, webhook_delivery.",
        ("kind",)),
    "jarvis_webhook_deliveries": Spec(
        "counter", "Webhook delivery tries by outcome: delivered, failed (to be tried "
        "again) or dead (the last try failed, or its lease ran out: never tried again).",
        ("outcome",)),
    "jarvis_schedule_firings": Spec(
        "counter", "Schedules' due times by outcome: fired (an agent made) or skipped "
        "(overlap: the last agent had not ended).", ("outcome",)),
    "jarvis_schedule_lag_seconds": Spec(
        "histogram", "Time from a schedule's due time to its agent's create.", ()),
}
EXPOSED = frozenset(SPECS)
_BUCKET_PARTS = {bound: f"le={bound}" for bound in LATENCY_BUCKETS}


def _field(name: str, labels: tuple[str, ...], part: str) -> str:
    return json.dumps([name, list(labels), part], separators=(",", ":"))


# A figure as counted in memory: (name, label values, part). Encoded as its hash field
# only when flushed, once per distinct figure, not at each of a worker's ~10 counts per
# iteration (three JSON encodings per observation cost more than the rest of it).
_Key = tuple[str, tuple[str, ...], str]


class ClusterMetrics:
    """This process's counts, added into Redis by a background flush."""

    def __init__(self, redis_client: Any, *, flush_s: float = FLUSH_S) -> None:
        self.redis = redis_client
        self.flush_s = flush_s
        self._pending: dict[_Key, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def inc(self, name: str, *labels: str, amount: float = 1.0) -> None:
        """Add to a counter of SPECS, its label values in the spec's order."""
        if amount:
            self._add((name, labels, ""), amount)

    def observe(self, name: str, *labels: str, seconds: float) -> None:
        """Count one observation in a histogram of SPECS."""
        bucket = next((b for b in LATENCY_BUCKETS if seconds <= b), None)
        le = _BUCKET_PARTS.get(bucket, "le=+Inf")
        with self._lock:
            pending = self._pending
            for part, amount in (("count", 1.0), ("sum", seconds), (le, 1.0)):
                key = (name, labels, part)
                pending[key] = pending.get(key, 0.0) + amount

    def forget(self, model: str) -> None:
        """Drop what was counted of `model`, here and in Redis (it is no longer in use):
        a flush after the prune that unlisted it would have put its series back."""
        with self._lock:
            self._pending = {key: amount for key, amount in self._pending.items()
                             if _model_of(key[0], key[1]) != model}
        try:
            forget_models(self.redis, {model})
        except Exception as exc:  # noqa: BLE001 - the prune that unlisted it deleted them
            log.warning("could not delete the figures of the model '%s': %s", model, exc)

    def _add(self, key: _Key, amount: float) -> None:
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + amount

    def flush(self) -> None:
        """Add what was counted since the last flush into Redis; kept for the next one
        if Redis does not answer."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)
            for key, amount in pending.items():
                pipe.hincrbyfloat(METRICS_KEY, _field(*key), amount)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - counted again with the next flush
            log.warning("could not flush metrics to Redis: %s", exc)
            with self._lock:
                for key, amount in pending.items():
                    self._pending[key] = self._pending.get(key, 0.0) + amount

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="jarvis-metrics-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()


def _model_of(name: str, labels: tuple[str, ...] | list[str]) -> str | None:
    """The value of a figure's `model` label; None if it has none."""
    spec = SPECS.get(name)
    if spec is None or "model" not in spec.labels or len(labels) != len(spec.labels):
        return None
    return labels[spec.labels.index("model")]


def forget_models(redis_client: Any, models: Collection[str]) -> int:
    """Delete every summed figure of these models, so that /metrics shows no series of
    them; one pass over the hash (models are pruned rarely). Returns how many went."""
    gone = []
    for raw_field, _ in redis_client.hscan_iter(METRICS_KEY):
        try:
            name, labels, _part = json.loads(raw_field)
        except ValueError:
            continue
        if _model_of(name, labels) in models:
            gone.append(raw_field)
    if gone:
        redis_client.hdel(METRICS_KEY, *gone)
    return len(gone)


def read_families(redis_client: Any) -> Iterator[Metric]:
    """The summed figures of every worker, as Prometheus metric families (one HGETALL)."""
    sums: dict[str, dict[tuple[str, ...], dict[str, float]]] = {name: {} for name in SPECS}
    for raw_field, raw_value in redis_client.hgetall(METRICS_KEY).items():
        try:
            name, labels, part = json.loads(raw_field)
        except ValueError:
            continue
        if name in sums:
            sums[name].setdefault(tuple(labels), {})[part] = float(raw_value)
    for name, spec in SPECS.items():
        if spec.kind == "counter":
            counter = CounterMetricFamily(name, spec.help, labels=spec.labels)
            for labels, parts in sorted(sums[name].items()):
                counter.add_metric(list(labels), parts.get("", 0.0))
            yield counter
            continue
        histogram = HistogramMetricFamily(name, spec.help, labels=spec.labels)
        for labels, parts in sorted(sums[name].items()):
            cumulative, buckets = 0.0, []
            for bound in (*LATENCY_BUCKETS, "+Inf"):
                cumulative += parts.get(f"le={bound}", 0.0)
                buckets.append((str(float(bound)) if bound != "+Inf" else "+Inf", cumulative))
            histogram.add_metric(list(labels), buckets, parts.get("sum", 0.0))
        yield histogram


class ClusterTimings:
    """The executor's Timings: tool calls into the cluster's figures, and everything
    into this process's own registry as before (`inner`). Model calls are timed by
    `llm.governed.GovernedModel`, which knows their model."""

    def __init__(self, inner: Any, metrics: ClusterMetrics) -> None:
        self.inner = inner
        self.metrics = metrics

    def planning(self, seconds: float) -> None:
        self.inner.planning(seconds)

    def tool(self, name: str, seconds: float) -> None:
        self.inner.tool(name, seconds)
        self.metrics.observe("jarvis_tool_seconds", name, seconds=seconds)

    def step(self, kind: str) -> None:
        self.inner.step(kind)

    def agent(self, status: str, seconds: float) -> None:
        self.inner.agent(status, seconds)

    def tokens(self, model: str, *, input_tokens: int, output_tokens: int) -> None:
        # Into this process's registry only: GovernedModel counts them for the cluster.
        self.inner.tokens(model, input_tokens=input_tokens, output_tokens=output_tokens)

    def forget(self, model: str) -> None:
        """Drop `model`'s series here and its counts not flushed yet."""
        self.inner.forget(model)
        self.metrics.forget(model)
