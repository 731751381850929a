"""How a model call is cut short: a cancellation, a shutdown, the step deadline.

The reply is read on the agent's own thread. What may interrupt a read that is
silent for seconds (a model loading before its first token) comes from outside: a
`StopSignal`'s `wake()` (a cancellation, a shutdown) and a watchdog thread, which
polls the conditions nobody wakes for every `poll_s` (100 ms for a plain callable)
and watches the step deadline. Both shut the connection's socket down
(`Call.abandon`), so the blocked read returns at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from jarvis_agents.errors import Cancelled, StepTimeout
from jarvis_agents.llm.base import StopSignal

logger = logging.getLogger(__name__)

POLL_S = 0.1  # the Protocol's promise: Cancelled or StepTimeout within ~100 ms


@dataclass(frozen=True)
class Interrupts:
    """The two reasons to abandon a call early, checked between waits and backoffs."""

    should_stop: Callable[[], bool]
    deadline: float
    budget_s: float
    # How long a wait may last before should_stop is looked at again (None: it wakes us).
    poll_s: float | None = field(init=False)

    def __post_init__(self) -> None:
        poll_s = self.should_stop.poll_s if isinstance(self.should_stop, StopSignal) else POLL_S
        object.__setattr__(self, "poll_s", poll_s)

    def waking(self, waker: Callable[[], None]) -> AbstractContextManager[None]:
        """Run `waker` whenever should_stop may have flipped, while the block runs."""
        if isinstance(self.should_stop, StopSignal):
            return self.should_stop.waking(waker)
        return nullcontext()

    def wait_s(self, until: float) -> float:
        """How long to wait before the next look: up to `until`, the deadline or a poll."""
        wait = min(until, self.deadline) - time.monotonic()
        return max(wait if self.poll_s is None else min(wait, self.poll_s), 0.0)

    def check(self) -> None:
        if self.should_stop():
            raise Cancelled("the agent was cancelled while waiting for the model")
        if time.monotonic() >= self.deadline:
            raise StepTimeout(
                "the model did not finish its reply within the step timeout "
                f"({max(self.budget_s, 0.0):.1f} s)"
            )

    def sleep(self, seconds: float) -> None:
        """A backoff that raises Cancelled or StepTimeout instead of sleeping through them."""
        end = time.monotonic() + seconds
        woken = threading.Event()
        with self.waking(woken.set):
            while True:
                self.check()
                if time.monotonic() >= end:
                    return
                woken.wait(self.wait_s(end))


class Call:
    """One attempt, read on the caller's thread, and the way to cut it from another.

    `abandon()` (a cancellation's wake-up, or the watchdog) shuts the connection's
    socket down: the read blocked on it returns at once, on the reading thread,
    which then raises Cancelled. shutdown() rather than close(): the descriptor stays
    the socket's until its owner closes it, so no other connection can be hit.

    `detach()` ends the call's hold on the socket before its connection is lent to
    another call: a cancellation or a watchdog look that lands after that (both run
    should_stop() outside any lock, so they can be late) must not cut the next
    borrower's reply. The socket is shut down under the lock for the same reason.
    """

    def __init__(self) -> None:
        self.abandoned = False
        self._sock: socket.socket | None = None
        self._detached = False
        self._lock = threading.Lock()

    def attach(self, sock: socket.socket) -> None:
        """The socket the request goes out on, before any wait on it."""
        with self._lock:
            self._sock = sock
            if self.abandoned:
                _shut(sock)

    def detach(self) -> bool:
        """Let go of the socket before its connection goes back to the pool.

        From now on `abandon()` does nothing. Returns whether the call was abandoned
        (its socket shut down, so its connection must not be kept).
        """
        with self._lock:
            self._sock = None
            self._detached = True
            return self.abandoned

    def abandon(self) -> None:
        with self._lock:
            if self.abandoned or self._detached:
                return
            self.abandoned = True
            # Under the lock: a detach() racing this shutdown would otherwise hand the
            # socket to another call just before it is cut.
            if self._sock is not None:
                _shut(self._sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to interrupt
        # socket's own shutdown, also for TLS: SSLSocket's would drop its SSL state
        # under the thread reading it.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One thread that cuts the calls nobody else can: at their deadline, and when a stop
    condition nobody wakes for holds (looked at every poll_s).

    A read's timeout ends at the deadline too, but it is set when the request goes out:
    a reply that trickles in, then stops, would otherwise wait a whole timeout more.

    A call's first look is due `poll_s` after it starts (or at its deadline, if sooner).
    The thread is woken for a new call only when it would otherwise sleep past that
    (it is idle, or its next look is later): a worker's agents all poll at the same
    interval, so nearly every model call starts and ends without waking it, a thread
    switch saved per call.
    """

    def __init__(self) -> None:
        self._calls: dict[Call, tuple[Callable[[], bool] | None, float, float, float]] = {}
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        # When the thread will look next on its own (-inf: it is looking now).
        self._wake_at = math.inf

    @contextlib.contextmanager
    def watching(self, call: Call, interrupts: Interrupts) -> Iterator[None]:
        # A StopSignal that wakes for all its conditions (poll_s None) needs no looks.
        poll_s = math.inf if interrupts.poll_s is None else interrupts.poll_s
        should_stop = None if interrupts.poll_s is None else interrupts.should_stop
        deadline = interrupts.deadline
        with self._changed:
            first_look = min(time.monotonic() + poll_s, deadline)
            self._calls[call] = (should_stop, poll_s, deadline, first_look)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="model-call-watchdog",
                                                daemon=True)
                self._thread.start()
            if first_look < self._wake_at:
                self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._calls.pop(call, None)

    def _run(self) -> None:
        next_look: dict[Call, float] = {}
        while True:
            with self._changed:
                while True:
                    while not self._calls:
                        next_look.clear()
                        self._wake_at = math.inf
                        self._changed.wait()
                    now = time.monotonic()
                    due: list[tuple[Call, Callable[[], bool] | None]] = []
                    for call, (should_stop, poll_s, deadline, first_look) in self._calls.items():
                        at = next_look.setdefault(call, first_look)
                        if at <= now:
                            # None: the deadline has passed, nothing to look at.
                            due.append((call, should_stop if now < deadline else None))
                            next_look[call] = min(now + poll_s, deadline)
                    for call in [c for c in next_look if c not in self._calls]:
                        del next_look[call]
                    if due:
                        self._wake_at = -math.inf  # it looks again once these are done
                        break
                    self._wake_at = min(next_look.values())
                    self._changed.wait(max(self._wake_at - now, 0.001))
            for call, should_stop in due:
                try:
                    stop = should_stop is None or should_stop()
                except Exception:  # a broken condition must not end the watchdog
                    logger.exception("a should_stop condition failed")
                    continue
                if stop:
                    call.abandon()


WATCHDOG = _Watchdog()
