"""A subscription: the messages of one channel for one consumer, whichever bus delivers them.

The hub (`events.hub`, Redis) and the in-memory bus (`events.memory`) both hand out
these; `follow` and the API read them the same way. Besides messages a subscription
yields two signals: RESYNC (messages may have been missed: catch up from the
record) and CLOSED (the process is shutting down: end the stream).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Final, Protocol, Self

from jarvis_agents.events.messages import Message


class Signal(str):
    """A notice to a subscriber, as opposed to a published Message."""


RESYNC: Final = Signal("resync")  # messages may have been missed: re-read the database
CLOSED: Final = Signal("closed")  # the process is shutting down: end the stream

MAX_QUEUED = 1000

# Takes a message for a waiting consumer; False: queue it and wake the consumer.
Writer = Callable[[Message], bool]


class Source(Protocol):
    """What hands out subscriptions: told when one closes, says whether it is live."""

    @property
    def connected(self) -> bool: ...

    def unsubscribe(self, subscription: Subscription) -> None: ...


class Subscription:
    """The messages of one channel for one consumer; close it in a `finally`.

    A deque and an Event rather than a `queue.Queue`: one consumer and a few
    producers (the hub's reader, its status check, `close`) need no lock around
    the deque, and the Event is lighter than the Queue's mutex and three
    Conditions (memory that counts per open stream when a process holds thousands).
    """

    def __init__(self, channel: str, *, source: Source) -> None:
        self.source = source
        self.channel = channel
        self._items: deque[Message | Signal] = deque()
        self._ready = threading.Event()  # set after every put; cleared before a wait
        self._overflowed = False
        # CLOSED is a flag, not an item: dropping a backlog can never lose it.
        self._ending = False
        self.closed = False
        # Lent by the consumer while it waits with nothing queued; see get().
        self.writer: Writer | None = None

    def get(self, timeout_s: float, *, writer: Writer | None = None) -> Message | Signal | None:
        """The next message or signal, or None when `timeout_s` passes quietly.

        With `writer`, the hub offers it the messages that arrive while this waits
        (`EventHub._deliver`); only what it declines is returned. The writer is lent
        only while nothing is queued and taken back by the first `put` and on return,
        so the consumer and the writer never act at once — given that they run on
        one thread, as greenlets do (the only case `api.sse.socket_writer` allows).
        """
        if self._ending:
            return CLOSED
        if self._overflowed:
            # A consumer too slow to keep up: drop the backlog, catch up from the record.
            self._overflowed = False
            self._items.clear()
            return RESYNC
        if not self._items:
            self._ready.clear()
            # Looked at again after the clear: a put in between has set the Event
            # before this clear, but its item is already in the deque.
            if not self._items:
                self.writer = writer
                try:
                    self._ready.wait(timeout_s)
                finally:
                    self.writer = None
                if self._ending:
                    return CLOSED
        try:
            return self._items.popleft()
        except IndexError:
            return None

    @property
    def connected(self) -> bool:
        """Whether live messages can arrive; when not, the record must be polled."""
        return self.source.connected

    def deliver(self, message: Message) -> None:
        """Hand a published message over: to the lent writer, else into the queue."""
        writer = self.writer
        if writer is None or not writer(message):
            self.put(message)

    def put(self, item: Message | Signal) -> None:
        self.writer = None  # the consumer wakes: from here on it writes, in order
        if item is CLOSED:
            self._ending = True
        elif len(self._items) >= MAX_QUEUED:
            self._overflowed = True
        else:
            self._items.append(item)
        self._ready.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.source.unsubscribe(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
