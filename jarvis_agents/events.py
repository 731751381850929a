"""Agent events over Redis pub/sub: one channel per agent, one per user for lifecycle.

The database is the record; pub/sub only makes it live. A publish that fails is
logged and dropped: subscribers catch up from the database (SSE replay by `seq`).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import RedisError

from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.lifecycle import Agent, Step, isoformat

log = logging.getLogger(__name__)

AGENT_CHANNEL = "jarvis:agent:{}"
USER_CHANNEL = "jarvis:user:{}"
CONTROL_CHANNEL = "jarvis:control"


def step_event(agent_id: uuid.UUID, step: Step) -> dict[str, Any]:
    """The SSE data of a step event (CONTRACT §4): the type in lower case."""
    return {
        "agent_id": str(agent_id),
        "seq": step.seq,
        "step": step.step,
        "type": step.type.value.lower(),
        "tool": step.tool,
        "content": step.content,
        "created_at": isoformat(step.created_at),
        "duration_ms": step.duration_ms,
    }


def status_event(agent: Agent) -> dict[str, Any]:
    return {
        "agent_id": str(agent.id),
        "status": agent.status.value,
        "stop_reason": agent.stop_reason.value if agent.stop_reason else None,
        "step_count": agent.step_count,
        "updated_at": isoformat(agent.updated_at or agent.created_at),
    }


@dataclass(frozen=True)
class QueuePush:
    """A task message ready for a queue that is a Redis list: LPUSH `payload` onto `key`.

    A dispatcher builds it (see `workers.celery_app.CeleryDispatcher.queue_push`) so
    that the enqueue can ride in the same round trip as a status publish.
    """

    key: str
    payload: str


@dataclass(frozen=True)
class Message:
    """One message as a subscriber sees it: `kind` is "step", "status" or "cancel"."""

    channel: str
    kind: str
    data: dict[str, Any]


class EventBus(Protocol):
    def publish_steps(self, agent: Agent, steps: Sequence[Step]) -> None: ...
    def publish_status(self, agent: Agent, *, push: QueuePush | None = None) -> None:
        """Publish a status change; with `push`, also queue that message (see RedisEventBus)."""
    def publish_cancel(self, agent_id: uuid.UUID) -> None: ...


class RedisEventBus:
    """Publishes to Redis; a failed publish is logged, never raised."""

    def __init__(self, redis_client: Any) -> None:
        self.redis = redis_client

    def publish_steps(self, agent: Agent, steps: Sequence[Step]) -> None:
        channel = AGENT_CHANNEL.format(agent.id)
        pipe = self.redis.pipeline(transaction=False)
        for step in steps:
            pipe.publish(channel, _encode("step", step_event(agent.id, step)))
        self._send(pipe, agent.id)

    def publish_status(self, agent: Agent, *, push: QueuePush | None = None) -> None:
        """Publish a status change; with `push`, LPUSH it too, in the same round trip.

        The Redis of this bus must be the broker's (one REDIS_URL for both). A publish
        is best effort, a push is not: if the pipeline carrying a push fails, this
        raises DependencyUnavailable. The client retries transient connection errors
        first (redis-py's Retry, see `components.redis_client`); a retry may push the
        message twice, which the claim's compare-and-set makes harmless.
        """
        payload = _encode("status", status_event(agent))
        pipe = self.redis.pipeline(transaction=False)
        pipe.publish(AGENT_CHANNEL.format(agent.id), payload)
        pipe.publish(USER_CHANNEL.format(agent.user_id), payload)
        if push is None:
            self._send(pipe, agent.id)
            return
        pipe.lpush(push.key, push.payload)
        try:
            pipe.execute()
        except (RedisError, OSError) as exc:
            raise DependencyUnavailable(f"the task queue (Redis) is unreachable: {exc}") from None

    def publish_cancel(self, agent_id: uuid.UUID) -> None:
        """Tell every worker to stop this agent now (they also see the Celery revoke)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.publish(CONTROL_CHANNEL, _encode("cancel", {"agent_id": str(agent_id)}))
        self._send(pipe, agent_id)

    def _send(self, pipe: Any, agent_id: uuid.UUID) -> None:
        try:
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - the database already holds the event
            log.warning("could not publish events of agent %s: %s", agent_id, exc)


class MemoryEventBus:
    """An in-process bus for unit tests: records what was published, in order."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.pushes: list[QueuePush] = []  # what would have been queued, in order
        self._lock = threading.Lock()
        self._queues: list[queue.Queue[Message]] = []

    def subscribe(self) -> queue.Queue[Message]:
        q: queue.Queue[Message] = queue.Queue()
        with self._lock:
            self._queues.append(q)
        return q

    def _put(self, message: Message) -> None:
        with self._lock:
            self.messages.append(message)
            for q in self._queues:
                q.put(message)

    def publish_steps(self, agent: Agent, steps: Sequence[Step]) -> None:
        for step in steps:
            self._put(Message(AGENT_CHANNEL.format(agent.id), "step", step_event(agent.id, step)))

    def publish_status(self, agent: Agent, *, push: QueuePush | None = None) -> None:
        self._put(Message(AGENT_CHANNEL.format(agent.id), "status", status_event(agent)))
        self._put(Message(USER_CHANNEL.format(agent.user_id), "status", status_event(agent)))
        if push is not None:
            with self._lock:
                self.pushes.append(push)

    def publish_cancel(self, agent_id: uuid.UUID) -> None:
        self._put(Message(CONTROL_CHANNEL, "cancel", {"agent_id": str(agent_id)}))


def _encode(kind: str, data: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, "data": data}, separators=(",", ":"))


def decode(channel: str | bytes, payload: str | bytes) -> Message | None:
    """Parse a published payload; None for anything that is not ours."""
    try:
        body = json.loads(payload)
        return Message(
            channel.decode() if isinstance(channel, bytes) else channel, body["kind"], body["data"]
        )
    except (ValueError, KeyError, TypeError):
        return None
