"""The one thing the engine asks of a model: a reply to a conversation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


class ChatModel(Protocol):
    """A chat model that can be interrupted.

    `deadline` is a `time.monotonic()` value: past it the call raises StepTimeout.
    `should_stop` is polled while the reply streams (and between retries): when it
    returns True the call raises Cancelled within ~100 ms, even mid-reply. A
    `StopSignal` need not be polled that often: its `wake()` interrupts the wait.
    Raises ModelNotFound for an unknown model and ModelUnavailable once retries
    of transient failures are exhausted.
    """

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        stop: Sequence[str],
        deadline: float,
        should_stop: Callable[[], bool],
    ) -> str: ...


class StopSignal:
    """A `should_stop` that also wakes the calls waiting on it the moment it may flip.

    Called, it says whether any of its conditions holds. Whoever makes a condition
    true (a cancel listener, a shutdown) calls `wake()`, which runs the wakers that
    waiting calls registered with `waking()`, so a model call blocks for its whole
    step budget instead of polling ten times a second per agent. `poll_s` is how
    often a waiter must still look by itself, for conditions nobody wakes for (a
    Celery revoke only adds to a set); None when every condition comes with a wake().
    """

    def __init__(self, *conditions: Callable[[], bool], poll_s: float | None = None) -> None:
        self._conditions = conditions
        self.poll_s = poll_s
        self._wakers: set[Callable[[], None]] = set()
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        return any(condition() for condition in self._conditions)

    def wake(self) -> None:
        """Make every waiting call look at the conditions again, now."""
        with self._lock:
            wakers = list(self._wakers)
        for waker in wakers:
            waker()

    @contextmanager
    def waking(self, waker: Callable[[], None]) -> Iterator[None]:
        """Call `waker` on every `wake()` while the block runs.

        Register before the first look at the conditions: a wake() between that
        look and the wait then still reaches the waiter.
        """
        with self._lock:
            self._wakers.add(waker)
        try:
            yield
        finally:
            with self._lock:
                self._wakers.discard(waker)
