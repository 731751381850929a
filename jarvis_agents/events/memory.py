"""The in-memory event bus, for tests and demos: what it publishes its subscriptions
receive at once, and `messages` records everything, in order."""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from collections.abc import Sequence

from jarvis_agents.events.messages import (
    AGENT_CHANNEL,
    CONTROL_CHANNEL,
    USER_CHANNEL,
    Message,
    status_event,
    step_event,
)
from jarvis_agents.events.subscription import CLOSED, RESYNC, Subscription
from jarvis_agents.events.tokens import (
    Listen,
    Registration,
    ReplyTokens,
    TokenBatch,
    TokenBatcher,
    token_event,
)
from jarvis_agents.lifecycle import Agent, Step


class MemoryEventBus:
    """An in-process bus; `drop()` and `resync()` play a lost publish and a reconnect."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.connected = True
        self._lock = threading.Lock()
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        self._dropping = 0
        self.token_listeners: dict[uuid.UUID, int] = defaultdict(int)
        self._tokens = TokenBatcher(publish=self._publish_tokens, listening=self._listening)

    def subscribe(self, channel: str) -> Subscription:
        subscription = Subscription(channel, source=self)
        with self._lock:
            self._subscriptions[channel].add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions[subscription.channel].discard(subscription)

    def subscriber_count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._subscriptions.values())

    def drop(self, count: int = 1) -> None:
        """The next `count` messages are recorded but reach no subscriber (a lost publish)."""
        self._dropping += count

    def resync(self) -> None:
        """Tell every subscriber it may have missed messages (a reconnect)."""
        self._broadcast(RESYNC)

    def close(self) -> None:
        """Tell every subscriber the process is shutting down."""
        self._broadcast(CLOSED)

    def _broadcast(self, signal: str) -> None:
        with self._lock:
            everyone = [s for subs in self._subscriptions.values() for s in subs]
        for subscription in everyone:
            subscription.put(signal)  # type: ignore[arg-type]

    def _put(self, message: Message) -> None:
        with self._lock:
            self.messages.append(message)
            if self._dropping:
                self._dropping -= 1
                return
            subscribers = list(self._subscriptions.get(message.channel, ()))
        for subscription in subscribers:
            subscription.deliver(message)

    def publish_steps(self, agent: Agent, steps: Sequence[Step], *, status: bool = False) -> None:
        for step in steps:
            self._put(Message(AGENT_CHANNEL.format(agent.id), "step", step_event(agent.id, step)))
        if status:
            self.publish_status(agent)

    def reply_tokens(self, agent_id: uuid.UUID, step: int) -> ReplyTokens:
        return self._tokens.reply(agent_id, step)

    def listen_tokens(self, agent_id: uuid.UUID) -> Listen:
        with self._lock:
            self.token_listeners[agent_id] += 1
        return Registration(self.leave_tokens, agent_id)

    def listener_heard(self, agent_id: uuid.UUID) -> None:
        """Nothing to learn: this bus's `listen_tokens` is seen by its batcher at once."""

    def leave_tokens(self, agent_id: uuid.UUID) -> None:
        with self._lock:
            self.token_listeners[agent_id] -= 1

    def _listening(self, agent_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        with self._lock:
            return {a for a in agent_ids if self.token_listeners.get(a, 0) > 0}

    def _publish_tokens(self, batches: Sequence[TokenBatch]) -> None:
        for agent_id, step, text in batches:
            self._put(Message(AGENT_CHANNEL.format(agent_id), "token",
                              token_event(agent_id, step, text)))

    def publish_status(self, agent: Agent) -> None:
        self._put(Message(AGENT_CHANNEL.format(agent.id), "status", status_event(agent)))
        self._put(Message(USER_CHANNEL.format(agent.user_id), "status", status_event(agent)))

    def publish_cancel(self, agent_id: uuid.UUID) -> None:
        self._put(Message(CONTROL_CHANNEL, "cancel", {"agent_id": str(agent_id)}))

    def flush(self, timeout_s: float = 5.0) -> bool:
        return True  # nothing is ever waiting: every publish is delivered as it is made

