"""One model call's attempts: retried on transient failures, cut by cancellation and
the deadline, and what to say once the retries are spent; and the call's live text,
handed on once however many attempts it took. Shared by the adapters, so that a
failure is retried in this one layer whatever the provider."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from jarvis_agents.errors import ModelUnavailable
from jarvis_agents.llm.base import OnDelta
from jarvis_agents.llm.interrupts import Interrupts
from jarvis_agents.retry import TransientModelError, model_call_policy

T = TypeVar("T")


@dataclass(frozen=True)
class Retries:
    """How often and how patiently an adapter tries a call (see `model_call_policy`)."""

    attempts: int = 3
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retries counts attempts and must be at least 1, not {self.attempts}")


def interrupts_for(should_stop: Callable[[], bool], deadline: float) -> Interrupts:
    """The call's interrupts, checked once before anything goes out."""
    interrupts = Interrupts(should_stop, deadline, deadline - time.monotonic())
    interrupts.check()
    return interrupts


def attempt(
    call: Callable[[], T], *, interrupts: Interrupts, retries: Retries, what: str, server: str
) -> T:
    """`call()`, tried again after each TransientModelError while attempts are left.

    `server` names the server in the final ModelUnavailable ("the Ollama server at …");
    `what` names the call in the warning logged before each backoff. A backoff ends
    early, raising, on a cancellation or at the deadline.
    """
    # The first try outside the policy: nearly every call succeeds at once, and building
    # and stepping through a tenacity policy is a measurable part of a model call's CPU
    # (BENCHMARKS.md). A first failure is handed to the policy as its first attempt (same
    # backoffs, same logs).
    attempts = 1
    try:
        return call()
    except TransientModelError as exc:
        first: TransientModelError | None = exc
    policy = model_call_policy(
        retries.attempts, sleep=interrupts.sleep, initial_s=retries.backoff_initial_s,
        max_s=retries.backoff_max_s, what=what,
    )
    try:
        for try_ in policy:
            with try_:
                if first is not None:
                    failed, first = first, None
                    raise failed
                attempts += 1
                return call()
    except TransientModelError as exc:
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if exc.unreachable:
            message = f"could not reach {server} after {tries}: {exc.reason}"
        else:
            message = f"{server} kept failing after {tries}: {exc.reason}"
        raise ModelUnavailable(message) from exc
    raise AssertionError("unreachable: the retry policy re-raises the last failure")


class AttemptDeltas:
    """One call's `on_delta` across its attempts: a listener reads the reply once.

    A retried attempt (a stream cut mid-reply) streams the reply again from its start.
    A `token` event cannot tell a client to start again (docs/api.md §6: its data is
    `agent_id`, `step` and `delta`, and a step's deltas, joined, are the reply's
    text), so a retry's text is compared with what the earlier attempts handed on,
    and only what goes beyond it is handed on. A retry whose text departs from it (a
    model that samples anew) hands on nothing more in this call: the listener is
    left with the start it has, never with two replies spliced, and the steps that
    follow the reply carry its whole text. Call `attempt()` for each attempt's
    `on_delta`; the first attempt's pieces go straight through.
    """

    def __init__(self, on_delta: OnDelta | None) -> None:
        self._on_delta = on_delta
        self._sent: list[str] = []  # the pieces handed on so far, by every attempt
        self._departed = False

    def attempt(self) -> OnDelta | None:
        """The `on_delta` of the next attempt (None when the call has none)."""
        on_delta, sent = self._on_delta, self._sent
        if on_delta is None:
            return None
        if not sent:

            def first(text: str) -> None:
                sent.append(text)
                on_delta(text)

            return first
        before = "".join(sent)
        read = 0  # how much of this attempt's text has come

        def again(text: str) -> None:
            nonlocal read
            if self._departed:
                return
            start, read = read, read + len(text)
            if start < len(before):
                repeated = before[start:read]
                if not text.startswith(repeated):
                    self._departed = True
                    return
                text = text[len(repeated):]
                if not text:
                    return
            sent.append(text)
            on_delta(text)

        return again
