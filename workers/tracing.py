"""The queue's part of an agent's trace (jarvis_agents/tracing.py): Celery instrumented,
and the trace context in the headers of the message the API pushes itself.

A create queues its agent with a message it LPUSHes in the same Redis round trip as
its PENDING publish (`CeleryDispatcher.queue_push`), so Celery's `before_task_publish`
never fires for it, and the Celery instrumentation neither makes its producer span nor
injects the trace context. `TracedDispatcher` does both for that message, as the
instrumentation does for `send_task` (which the worker's sweeper and hand-backs use):
the worker's `run/jarvis.run_agent` span is then a child of the create's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from jarvis_agents import tracing
from jarvis_agents.events import QueuePush
from jarvis_agents.service import Dispatcher


def instrument_celery() -> None:
    """Spans for the tasks this process runs and sends (tracing on only)."""
    if not tracing.enabled():
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


class TracedDispatcher:
    """A Dispatcher whose pushed messages carry the trace they were queued in."""

    def __init__(self, inner: Dispatcher) -> None:
        self._inner = inner

    def queue_push(self, agent_id: uuid.UUID, *, task_id: str) -> QueuePush | None:
        from opentelemetry import propagate, trace

        push = self._inner.queue_push(agent_id, task_id=task_id)
        if push is None:
            return None
        envelope = json.loads(push.payload)
        headers = envelope["headers"]  # Celery's protocol 2: what task.request is made of
        name = headers.get("task", "unknown")
        # Named and described as the Celery instrumentation's own producer span.
        with trace.get_tracer(tracing.TRACER_NAME).start_as_current_span(
            f"apply_async/{name}", kind=trace.SpanKind.PRODUCER,
            attributes={"celery.action": "apply_async", "celery.task_name": name,
                        "messaging.message.id": task_id, "messaging.destination.name": push.key,
                        tracing.AGENT_ID: str(agent_id)},
        ):
            propagate.inject(headers)
        return replace(push, payload=json.dumps(envelope))

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str) -> None:
        self._inner.enqueue(agent_id, task_id=task_id)

    def revoke(self, task_ids: Sequence[str]) -> None:
        self._inner.revoke(task_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def traced_dispatcher(dispatcher: Dispatcher) -> Dispatcher:
    return TracedDispatcher(dispatcher) if tracing.enabled() else dispatcher
