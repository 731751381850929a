"""Every retry policy of the system, in one place.

Each policy is a named function returning a configured `tenacity.Retrying` with an
explicit stop, wait, exception predicate and `reraise=True`, so a reader can see in
one file what is retried, how often and how patiently. A failure is retried in
exactly one layer: the layer that owns the policy; callers above it never retry the
same failure again.

Use a policy as an iterator of attempts:

    for attempt in model_call_policy(3, sleep=interruptible_sleep):
        with attempt:
            reply = call_the_model()
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from jarvis_agents.errors import ModelError

logger = logging.getLogger(__name__)

Sleep = Callable[[float], None]


class TransientModelError(ModelError):
    """Raised inside a model adapter for a failure another attempt may cure.

    Connection refused or reset, a timeout, HTTP 5xx or 429, a stream cut short.
    It never leaves the adapter: once the policy gives up, the adapter turns it
    into ModelUnavailable with a sentence naming the server.
    """

    def __init__(self, reason: str, *, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        # True when the server could not be reached at all (as opposed to answering
        # with an error); it only changes the wording of the final message.
        self.unreachable = unreachable


def model_call_policy(
    attempts: int,
    *,
    sleep: Sleep,
    initial_s: float = 0.5,
    max_s: float = 8.0,
    what: str = "model call",
) -> Retrying:
    """Retry one model call on TransientModelError: `attempts` tries in total.

    Backoff doubles from `initial_s` up to `max_s`, plus up to `initial_s` of random
    jitter so a hundred agents that lost the server at the same moment do not come
    back in lock-step. `sleep` is injected so the caller's cancellation and step
    deadline interrupt a backoff (it raises instead of returning). `what` names the
    operation in the warning logged before each backoff.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    return Retrying(
        stop=stop_after_attempt(attempts),
        # Composed rather than wait_exponential_jitter: its `initial` argument is
        # deprecated in tenacity 9 (a warning, an error under our pytest settings)
        # while its replacement `multiplier` does not exist in tenacity 8.
        wait=wait_exponential(multiplier=initial_s, max=max_s) + wait_random(0, initial_s),
        retry=retry_if_exception_type(TransientModelError),
        reraise=True,
        sleep=sleep,
        before_sleep=_log_retry(what, attempts),
    )


def _log_retry(what: str, attempts: int) -> Callable[[RetryCallState], None]:
    # tenacity's before_sleep_log names the wrapped function, which an iterated
    # Retrying does not have ("Retrying <unknown> …"); say what is being retried.
    def log(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        wait_s = state.next_action.sleep if state.next_action is not None else 0.0
        logger.warning(
            "%s failed (attempt %d of %d): %s; retrying in %.2f s",
            what, state.attempt_number, attempts, failure, wait_s,
        )

    return log
