"""One model call's attempts: retried on transient failures, cut by cancellation and
the deadline, and what to say once the retries are spent. Shared by the adapters, so
that a failure is retried in this one layer whatever the provider."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from jarvis_agents.errors import ModelUnavailable
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
    # and stepping through a tenacity policy cost ~60 us of CPU per model call. A first
    # failure is handed to the policy as its first attempt (same backoffs, same logs).
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
