"""The event bus on Redis pub/sub: publishes here, subscriptions through the hub.

The database is the record; pub/sub only makes it live. A publish that fails is
logged and dropped: subscribers catch up from the database (`events.follow`).

The worker's publishes (`publish_steps`, with or without the status that follows
them) are combined: one published while no write is out goes at once, and the
ones published meanwhile share the next write, so under load the events of many
agents go in one batch (see `_Sender`). Nobody waits for Redis's replies to them:
they are read before the next batch goes out, by which time they have arrived.
The API's publishes (`publish_status`, `publish_cancel`) are sent on their own, as
before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from jarvis_agents.events.hub import EventHub
from jarvis_agents.events.messages import (
    AGENT_CHANNEL,
    CONTROL_CHANNEL,
    USER_CHANNEL,
    encode,
    status_event,
    step_event,
)
from jarvis_agents.events.subscription import Subscription
from jarvis_agents.events.tokens import (
    LISTENER_TTL_S,
    TOKEN_LISTENERS,
    Listen,
    ReplyTokens,
    TokenBatch,
    TokenBatcher,
    token_event,
)
from jarvis_agents.lifecycle import Agent, Step

log = logging.getLogger(__name__)

class RedisEventBus:
    """Publishes to Redis (a failed publish is logged, never raised); subscribes through
    `hub`, the process's one pub/sub connection (made at the first subscribe if not given)."""

    def __init__(self, redis_client: Any, *, hub: EventHub | None = None) -> None:
        self.redis = redis_client
        self._hub = hub
        self._sender: _Sender | None = None
        self._sender_lock = threading.Lock()
        self._tokens: TokenBatcher | None = None
        # Agents a token listener was announced for (events.tokens), until when it holds.
        self._announced: dict[uuid.UUID, float] = {}
        # Per agent thread: a reply's last token batch, (agent id, commands), held for
        # the steps that thread publishes next.
        self._held = threading.local()

    @property
    def hub(self) -> EventHub:
        if self._hub is None:
            with self._sender_lock:
                if self._hub is None:
                    self._hub = EventHub(self.redis)
        return self._hub

    def subscribe(self, channel: str) -> Subscription:
        """A channel's messages from now on (subscribe before reading the record)."""
        return self.hub.subscribe(channel)

    @property
    def connected(self) -> bool:
        return self.hub.connected

    def publish_steps(self, agent: Agent, steps: Sequence[Step], *, status: bool = False) -> None:
        """Publish the step events (and with `status` the status after them), in order.

        Sent before this returns unless another round trip is out, in which case they
        ride in the next one (sent by that thread). `flush()` waits until everything
        published so far has been sent.
        """
        channel = AGENT_CHANNEL.format(agent.id)
        commands = [("PUBLISH", channel, encode("step", step_event(agent.id, step)))
                    for step in steps]
        held = getattr(self._held, "tokens", None)
        if held is not None:
            self._held.tokens = None
            if held[0] == agent.id:  # else an attempt that stopped before its steps: dropped
                commands = held[1] + commands
        if status:
            commands += [("PUBLISH", channel, payload) for channel, payload in _status_messages(agent)]
        if commands:
            self._background().put(commands)

    def reply_tokens(self, agent_id: uuid.UUID, step: int) -> ReplyTokens:
        """The `on_delta` of one reply (use it as a context manager around the model call):
        its text goes out as token events while somebody listens (events.tokens)."""
        batcher = self._tokens
        if batcher is None or batcher.pid != os.getpid():
            with self._sender_lock:
                batcher = self._tokens
                if batcher is None or batcher.pid != os.getpid():
                    batcher = self._tokens = TokenBatcher(
                        publish=self._publish_tokens, listening=self._listening,
                        publish_rest=self._hold_tokens)
        return batcher.reply(agent_id, step)

    def listener_heard(self, agent_id: uuid.UUID) -> None:
        """An API process announced a token listener of the agent (on the control
        channel, at its registration and at each refresh): publish its tokens while
        that registration may live, starting with what its reply holds now."""
        now = time.monotonic()
        if len(self._announced) > 10_000:  # agents long gone: forget them
            self._announced = {a: t for a, t in self._announced.items() if t > now}
        self._announced[agent_id] = now + LISTENER_TTL_S
        batcher = self._tokens
        if batcher is not None:
            batcher.wake(agent_id)

    def _listening(self, agent_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        now = time.monotonic()
        return {a for a in agent_ids if self._announced.get(a, 0.0) > now}

    def listen_tokens(self, agent_id: uuid.UUID) -> Listen:
        """Register as a listener of the agent's tokens until the result is closed."""
        return self.hub.listen_tokens(agent_id)

    def _publish_tokens(self, batches: Sequence[TokenBatch]) -> None:
        # Through the same sender as the steps: a reply's tokens go before its steps.
        # Each is published by Redis only if the agent has a token listener registered
        # at that moment (events.tokens): the check rides in the write, with no round
        # trip of its own, where asking first (EXISTS) cost one per reply under load.
        self._background().put(_token_commands(batches))

    def _hold_tokens(self, batches: Sequence[TokenBatch]) -> None:
        # A complete reply's last batch (on the agent's thread, which publishes the
        # reply's steps next): it goes in the same write as they do, not a write of its
        # own. An attempt that stops before publishing them (superseded, cancelled)
        # drops it.
        self._held.tokens = (batches[0][0], _token_commands(batches))

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until the events queued so far are sent (or dropped); False on timeout."""
        sender = self._sender
        return True if sender is None else sender.flush(timeout_s)

    def _background(self) -> _Sender:
        sender = self._sender
        if sender is None or sender.pid != os.getpid():  # none yet, or inherited by a fork
            with self._sender_lock:
                sender = self._sender
                if sender is None or sender.pid != os.getpid():
                    sender = self._sender = _Sender(self.redis)
        return sender

    def publish_status(self, agent: Agent) -> None:
        """Publish a status change, on the agent's channel and its user's, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for channel, payload in _status_messages(agent):
            pipe.publish(channel, payload)
        self._send(pipe, agent.id)

    def publish_cancel(self, agent_id: uuid.UUID) -> None:
        """Tell every worker to stop this agent now (they also see the Celery revoke)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.publish(CONTROL_CHANNEL, encode("cancel", {"agent_id": str(agent_id)}))
        self._send(pipe, agent_id)

    def _send(self, pipe: Any, agent_id: uuid.UUID) -> None:
        try:
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - the database already holds the event
            log.warning("could not publish events of agent %s: %s", agent_id, exc)


_Batch = list[tuple[Any, ...]]  # Redis commands (PUBLISH, or EVAL of one) in order

# PUBLISH ARGV[2] on channel ARGV[1] if the hash KEYS[1] (an agent's token listeners) exists.
PUBLISH_IF_LISTENED = (
    "if redis.call('EXISTS', KEYS[1]) == 1 then "
    "return redis.call('PUBLISH', ARGV[1], ARGV[2]) end return 0"
)


# Past this many batches waiting (Redis down or hung for a long time), new ones are
# dropped instead of growing the worker's memory: the database keeps every step.
MAX_BACKLOG = 100_000

# Writes a publishing agent thread makes for the batches that queued up behind
# its own before it hands the rest to the sender thread and goes back to its agent.
LEADER_ROUNDS = 2


class _Sender:
    """Sends batches in order, every batch waiting at that moment in one write.

    Whoever publishes while no write is out sends at once, on its own thread: one
    agent alone pays no thread switch (waking another thread here costs up to a GIL
    switch interval, 5 ms, while the agent's thread runs on). Batches published
    while a write is out are queued and go in the next one, so under load the events
    of many agents share a write. A thread that has sent LEADER_ROUNDS batches
    passes what is still queued to the sender thread instead of working for the
    other agents indefinitely.

    The PUBLISHes go out on one connection of the client's pool that this sender
    keeps, and their replies (subscriber counts) are read just before the next batch
    is written, not waited for: an agent's thread goes back to its agent as soon as
    its events are on the wire (a Redis round trip saved per step). A
    publish is best effort either way; a Redis that failed shows up as an error
    reading those replies or writing the next batch, which is logged, and the next
    batch goes out on a new connection.
    """

    def __init__(self, redis_client: Any) -> None:
        self.redis = redis_client
        self.pid = os.getpid()
        self._pending: list[_Batch] = []
        self._busy = False  # a thread is sending; it will also send what is pending
        self._changed = threading.Condition(threading.Lock())
        self._handoff = threading.Event()
        self._thread: threading.Thread | None = None
        self._dropped = 0
        # Touched only by the thread that is sending (the one that set _busy).
        self._connection: Any = None
        self._unread = 0  # replies of the last batch not read yet

    def put(self, batch: _Batch) -> None:
        with self._changed:
            if len(self._pending) >= MAX_BACKLOG:
                self._dropped += 1
                if self._dropped % 1000 == 1:
                    log.warning("Redis is not taking events; dropped %s batches so far",
                                self._dropped)
                return
            self._pending.append(batch)
            if self._busy:
                return
            self._busy = True
        if not self._drain(LEADER_ROUNDS):
            self._hand_off()

    def flush(self, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._busy and not self._pending, timeout_s)

    def _drain(self, rounds: int | None) -> bool:
        """Send until nothing is pending (True) or `rounds` writes are done (False)."""
        sent = 0
        while rounds is None or sent < rounds:
            with self._changed:
                batches, self._pending = self._pending, []
                if not batches:
                    self._busy = False
                    self._changed.notify_all()
                    return True
            self._send([message for batch in batches for message in batch])
            sent += 1
        return False

    def _hand_off(self) -> None:
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="jarvis-event-sender", daemon=True
                )
                self._thread.start()
        self._handoff.set()

    def _run(self) -> None:
        while True:
            self._handoff.wait()
            self._handoff.clear()
            self._drain(None)

    def _send(self, messages: _Batch) -> None:
        try:
            connection = self._ready_connection()
            connection.send_packed_command(
                connection.pack_commands(messages),
                check_health=False,  # a health check's PING would read our replies
            )
            self._unread = len(messages)
        except Exception as exc:  # noqa: BLE001 - the database already holds the events
            self._drop_connection()
            log.warning("could not publish %s events: %s", len(messages), exc)

    def _ready_connection(self) -> Any:
        """The kept connection with the last batch's replies read, or a new one."""
        connection = self._connection
        if connection is not None:
            unread, self._unread = self._unread, 0
            try:
                for _ in range(unread):
                    connection.read_response()
            except Exception as exc:  # noqa: BLE001 - logged; a new connection follows
                log.warning("Redis failed after %s events were sent; they may be lost: %s",
                            unread, exc)
                connection = None
            # Anything more to read means the server closed it (a restart, an idle
            # timeout): take a new one rather than lose the batch on it.
            with contextlib.suppress(Exception):
                if connection is not None and not connection.can_read(0):
                    return connection
            self._drop_connection()
        self._connection = self.redis.connection_pool.get_connection()
        return self._connection

    def _drop_connection(self) -> None:
        connection, self._connection, self._unread = self._connection, None, 0
        if connection is not None:
            connection.disconnect()
            self.redis.connection_pool.release(connection)


def _token_commands(batches: Sequence[TokenBatch]) -> _Batch:
    return [
        ("EVAL", PUBLISH_IF_LISTENED, 1, TOKEN_LISTENERS.format(agent_id),
         AGENT_CHANNEL.format(agent_id), encode("token", token_event(agent_id, step, text)))
        for agent_id, step, text in batches
    ]


def _status_messages(agent: Agent) -> list[tuple[str, str]]:
    """A status change as published: on the agent's channel, then on its user's."""
    payload = encode("status", status_event(agent))
    return [(AGENT_CHANNEL.format(agent.id), payload), (USER_CHANNEL.format(agent.user_id), payload)]
