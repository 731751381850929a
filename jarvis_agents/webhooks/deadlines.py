"""A deadline for a whole exchange over a socket, however the other end trickles.

A socket's timeout bounds each send or receive, not their sum: a receiver that sends a
byte every few seconds keeps every receive under it for as long as it likes. Here one
thread watches the deadlines of the exchanges under way and, when one passes, shuts
its socket down (`socket.shutdown`, which a blocked receive in another thread returns
from at once), so the exchange fails there. An exchange still connecting (no socket
yet) is bounded by its connect timeout, and looked at again every RECHECK_S until it
has a socket to shut or ends.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

RECHECK_S = 0.05


@dataclass(eq=False)
class Watch:
    """One exchange's deadline."""

    socket_of: Callable[[], socket.socket | None]  # its socket as it is now (None: not yet)
    deadline: float  # time.monotonic()
    ended: bool = False
    expired: bool = False  # the deadline passed first: the socket was shut down


class Deadlines:
    """Shuts down the sockets of exchanges that outlive their deadline, from one thread
    (started at the first exchange, and again in a forked child)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def bounded(self, socket_of: Callable[[], socket.socket | None],
                seconds: float) -> Iterator[Watch]:
        """Watch the exchange in the block, which must be over `seconds` from now; once
        the block is left its socket is never shut from here, and `expired` says whether
        it was."""
        watch = Watch(socket_of, time.monotonic() + seconds)
        with self._changed:
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="jarvis-webhook-deadlines",
                                                daemon=True)
                self._thread.start()
            first = not self._heap or watch.deadline < self._heap[0][0]
            heapq.heappush(self._heap, (watch.deadline, next(self._order), watch))
            if first:
                self._changed.notify()
        try:
            yield watch
        finally:
            with self._changed:  # the watcher shuts a socket down under this lock
                watch.ended = True

    def close(self) -> None:
        """Stop the watcher (exchanges still under way are no longer bounded)."""
        with self._changed:
            self._closed = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=2)

    def _run(self) -> None:
        with self._changed:
            while not self._closed:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, watch = heapq.heappop(self._heap)
                    if not watch.ended:
                        self._expire(watch, now)
                self._changed.wait(self._heap[0][0] - now if self._heap else None)

    def _expire(self, watch: Watch, now: float) -> None:
        watch.expired = True
        sock = watch.socket_of()
        if sock is None:  # still connecting
            heapq.heappush(self._heap, (now + RECHECK_S, next(self._order), watch))
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed, or never connected
            pass
