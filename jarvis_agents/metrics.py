"""Prometheus metrics of one worker process, served on its own port (JARVIS_WORKER_METRICS_PORT).

Workers record planning, tool and step metrics in their own process (steps by type
are their `jarvis_steps_written` counters). The whole system's figures, the API's
`/metrics`, come from the database, the queues and what every worker adds into Redis
(`cluster_metrics`, `api/system.py`).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

PLANNING_SECONDS = Histogram(
    "jarvis_planning_seconds", "Time of one planning call to the model.", buckets=LATENCY_BUCKETS
)
TOOL_SECONDS = Histogram(
    "jarvis_tool_seconds", "Time of one tool call.", ["tool"], buckets=LATENCY_BUCKETS
)
AGENT_SECONDS = Histogram(
    "jarvis_agent_seconds", "Time of a whole agent, first start to end.", ["status"],
    buckets=LATENCY_BUCKETS,
)
STEPS_WRITTEN = Counter("jarvis_steps_written", "Steps persisted by this process.", ["type"])
# `jarvis_model_tokens_total` once exposed (prometheus_client adds the _total).
MODEL_TOKENS = Counter(
    "jarvis_model_tokens", "Tokens of the model calls made by this process, as their servers "
    "counted them.", ["model", "direction"],
)


class PrometheusTimings:
    """The executor's Timings, recorded into this process's Prometheus registry.

    A labelled metric's child is looked up once per label value and kept: `labels()`
    takes a lock and builds its key on every call, several times per iteration.
    """

    def __init__(self) -> None:
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def planning(self, seconds: float) -> None:
        PLANNING_SECONDS.observe(seconds)

    def tool(self, name: str, seconds: float) -> None:
        self._child(TOOL_SECONDS, name).observe(seconds)

    def step(self, kind: str) -> None:
        self._child(STEPS_WRITTEN, kind).inc()

    def agent(self, status: str, seconds: float) -> None:
        self._child(AGENT_SECONDS, status).observe(seconds)

    def tokens(self, model: str, *, input_tokens: int, output_tokens: int) -> None:
        if input_tokens:
            self._child(MODEL_TOKENS, model, "input").inc(input_tokens)
        if output_tokens:
            self._child(MODEL_TOKENS, model, "output").inc(output_tokens)

    def forget(self, model: str) -> None:
        """Remove `model`'s series from this process's registry (it is no longer in use)."""
        for direction in ("input", "output"):
            MODEL_TOKENS.remove(model, direction)
            self._children.pop((MODEL_TOKENS, (model, direction)), None)
