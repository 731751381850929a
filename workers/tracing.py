"""The queue's part of an agent's trace (jarvis_agents/tracing.py): Celery instrumented,
and the trace context in the headers of the messages the API sends.

The API does not turn Celery's instrumentation on: its publish hook keeps the producer
span only for a task registered in the sending process (the API sends `run_agent` by
name), and would leave it open otherwise. `TracedDispatcher` makes that span itself and
puts the trace context into the message's headers, as the instrumentation does for the
worker's own sends (the sweeper's and the hand-backs'): the worker's
`run/jarvis.run_agent` span is then a child of the create's.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from jarvis_agents import tracing
from jarvis_agents.dispatch import Dispatcher
from workers.celery_app import QUEUE, RUN_AGENT, CeleryDispatcher


def instrument_celery() -> None:
    """Spans for the tasks this process runs and sends (tracing on only)."""
    if not tracing.enabled():
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


class TracedDispatcher:
    """A Celery dispatcher whose messages carry the trace they were queued in."""

    def __init__(self, inner: CeleryDispatcher) -> None:
        self._inner = inner

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str | None = None) -> None:
        from opentelemetry import propagate, trace

        # Named and described as the Celery instrumentation's own producer span.
        with trace.get_tracer(tracing.TRACER_NAME).start_as_current_span(
            f"apply_async/{RUN_AGENT}", kind=trace.SpanKind.PRODUCER,
            attributes={"celery.action": "apply_async", "celery.task_name": RUN_AGENT,
                        "messaging.message.id": task_id,
                        "messaging.destination.name": queue or QUEUE,
                        tracing.AGENT_ID: str(agent_id)},
        ):
            headers: dict[str, str] = {}
            propagate.inject(headers)
            self._inner.enqueue(agent_id, task_id=task_id, queue=queue, headers=headers)

    def revoke(self, task_ids: Sequence[str]) -> None:
        self._inner.revoke(task_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def traced_dispatcher(dispatcher: CeleryDispatcher) -> Dispatcher:
    return TracedDispatcher(dispatcher) if tracing.enabled() else dispatcher
