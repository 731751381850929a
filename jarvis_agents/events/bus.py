"""The event bus interface: publish an agent's steps and status, subscribe to channels.

Two implementations side by side: `RedisEventBus` (events.redis_bus, pub/sub, its
subscriptions through the process's one hub) and `MemoryEventBus` (events.memory,
for tests and demos). The database is the record; the bus only makes it live.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from jarvis_agents.events.subscription import Subscription
from jarvis_agents.events.tokens import Listen, ReplyTokens
from jarvis_agents.lifecycle import Agent, Step


class Subscriber(Protocol):
    """Hands out subscriptions (the hub, or a bus through it)."""

    def subscribe(self, channel: str) -> Subscription:
        """A channel's messages from now on: subscribe before reading the record."""

    def listen_tokens(self, agent_id: uuid.UUID) -> Listen:
        """Have the agent's tokens published (docs/api.md §6) until the result is closed."""


class EventBus(Subscriber, Protocol):
    def publish_steps(self, agent: Agent, steps: Sequence[Step], *, status: bool = False) -> None:
        """Publish step events, then with `status` the agent's status; maybe in the background."""

    def reply_tokens(self, agent_id: uuid.UUID, step: int) -> ReplyTokens:
        """The `on_delta` of one reply, as a context manager around the model call:
        published as token events while somebody listens, never persisted."""

    def listener_heard(self, agent_id: uuid.UUID) -> None:
        """A worker heard that someone listens to the agent's tokens (the control
        channel's `tokens` message): its replies' text goes out from now on."""

    def publish_status(self, agent: Agent) -> None:
        """Publish a status change (sent before this returns)."""

    def publish_cancel(self, agent_id: uuid.UUID) -> None:
        """Tell every worker to stop this agent now."""

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until what was published so far has been sent; False on timeout."""
