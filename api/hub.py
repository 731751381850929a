"""The event hub: one Redis pub/sub connection per API process, fanned out to streams.

A thousand open SSE streams must not mean a thousand Redis connections. The hub
pattern-subscribes once to every agent and user channel and hands each message to
the subscriptions registered for its channel. Its reader runs in a background
thread (a greenlet under gevent) and reconnects by itself; because messages sent
while it was away are lost, every (re)connection and every overflowing queue tells
the subscribers to `RESYNC` — catch up from the database, which is the record.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from types import TracebackType
from typing import Any, Final, Self

from jarvis_agents.events import AGENT_CHANNEL, USER_CHANNEL, Message, decode

log = logging.getLogger(__name__)

PATTERNS: Final = (AGENT_CHANNEL.format("*"), USER_CHANNEL.format("*"))


class Signal(str):
    """A hub notice to a subscriber, as opposed to a published Message."""


RESYNC: Final = Signal("resync")  # messages may have been missed: re-read the database
CLOSED: Final = Signal("closed")  # the process is shutting down: end the stream

MAX_QUEUED = 1000


class Subscription:
    """The messages of one channel for one consumer; close it in a `finally`."""

    def __init__(self, hub: EventHub, channel: str) -> None:
        self.hub = hub
        self.channel = channel
        self._queue: queue.Queue[Message | Signal] = queue.Queue(maxsize=MAX_QUEUED)
        self._overflowed = False
        self.closed = False

    def get(self, timeout_s: float) -> Message | Signal | None:
        """The next message or signal, or None when `timeout_s` passes quietly."""
        if self._overflowed:
            # A consumer too slow to keep up: drop the backlog, catch up from the record.
            self._overflowed = False
            self._drain()
            return RESYNC
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def put(self, item: Message | Signal) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            if item is CLOSED:
                self._drain()
                self._queue.put_nowait(item)
            else:
                self._overflowed = True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.unsubscribe(self)

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class EventHub:
    """Fans the messages of one Redis pub/sub connection out to Subscriptions."""

    def __init__(
        self, redis_client: Any, *, first_connect_wait_s: float = 2.0, max_backoff_s: float = 5.0
    ) -> None:
        self.redis = redis_client
        self.first_connect_wait_s = first_connect_wait_s
        self.max_backoff_s = max_backoff_s
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._first_attempt = threading.Event()
        self._connected = False
        self._thread: threading.Thread | None = None

    @property
    def connected(self) -> bool:
        """Whether live messages are flowing; when not, streams poll the database."""
        return self._connected

    def subscribe(self, channel: str) -> Subscription:
        """Register for a channel's messages, from now on (join before reading the record)."""
        subscription = Subscription(self, channel)
        if self._closing.is_set():
            subscription.put(CLOSED)
            return subscription
        with self._lock:
            self._subscriptions[channel].add(subscription)
        self._start()
        # Only the very first streams wait, so that they do not miss what is
        # published while the connection comes up; if Redis is down they poll.
        self._first_attempt.wait(self.first_connect_wait_s)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            subscribers = self._subscriptions.get(subscription.channel)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscriptions[subscription.channel]

    def subscriber_count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._subscriptions.values())

    def close(self) -> None:
        """Stop reading and tell every open stream to end."""
        self._closing.set()
        with self._lock:
            everyone = [s for subs in self._subscriptions.values() for s in subs]
        for subscription in everyone:
            subscription.put(CLOSED)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=3)

    # --- the reader ------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jarvis-event-hub", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        backoff_s = 0.2
        while not self._closing.is_set():
            pubsub = self.redis.pubsub()
            try:
                pubsub.psubscribe(*PATTERNS)
                while not self._closing.is_set():
                    raw = pubsub.get_message(timeout=1.0)
                    if raw is not None:
                        self._handle(raw)
                        backoff_s = 0.2
            except Exception as exc:  # noqa: BLE001 - Redis restarts; reconnect and resync
                if self._connected:
                    log.warning("event hub lost Redis (%s); reconnecting", exc)
                self._connected = False
                self._first_attempt.set()
                self._closing.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.max_backoff_s)
            finally:
                try:
                    pubsub.close()
                except Exception as exc:  # noqa: BLE001 - the connection is already gone
                    log.debug("closing the hub's pub/sub failed: %s", exc)
        self._connected = False

    def _handle(self, raw: dict[str, Any]) -> None:
        kind = raw.get("type")
        if kind == "pmessage":
            message = decode(raw["channel"], raw["data"])
            if message is None:
                return
            with self._lock:
                subscribers = list(self._subscriptions.get(message.channel, ()))
            for subscription in subscribers:
                subscription.put(message)
        elif kind == "psubscribe" and _text(raw.get("channel")) == PATTERNS[-1]:
            # Confirmed (again, after redis-py reconnected by itself): anything
            # published while we were away is lost, so everyone catches up.
            if not self._connected:
                log.info("event hub subscribed to %s", ", ".join(PATTERNS))
            self._connected = True
            self._first_attempt.set()
            self._broadcast(RESYNC)

    def _broadcast(self, signal: Signal) -> None:
        with self._lock:
            everyone = [s for subs in self._subscriptions.values() for s in subs]
        for subscription in everyone:
            subscription.put(signal)


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
