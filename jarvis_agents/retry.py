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
import time
from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    stop_never,
    wait_exponential,
    wait_random,
)

from jarvis_agents.errors import DependencyUnavailable, JarvisError, ModelError, first_line

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


def remote_send_policy(is_cut: Callable[[BaseException], bool], *, attempts: int = 3,
                       initial_s: float = 0.5, max_s: float = 4.0) -> Retrying:
    """Retry a remote delegate's SendMessage whose connection failed or was cut (`is_cut`):
    it is sent again as the same message, which the remote takes for the same task."""
    return Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=initial_s, max=max_s) + wait_random(0, initial_s),
        retry=retry_if_exception(is_cut),
        reraise=True,
        before_sleep=_log_retry("SendMessage to a remote agent", attempts),
    )


def is_database_outage(exc: BaseException) -> bool:
    """Whether `exc` is what a database restart or a dropped connection raises.

    SQLAlchemy's OperationalError (refused, reset, "terminating connection due to
    administrator command", "the database system is starting up", and SQLite's
    "database is locked") and InterfaceError ("connection already closed"), or any
    error that invalidated its connection. Not an IntegrityError or a bad value: the
    statement itself was refused, and would be again.
    """
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def is_infrastructure_fault(exc: BaseException) -> bool:
    """Whether `exc` says a service around the system failed (the database, Redis, the
    network), rather than the system itself.

    An attempt that ends on one is left to be resumed, as a lost worker's is; any other
    unexpected exception is a bug, and fails its agent with `internal_error`.
    """
    return is_database_outage(exc) or isinstance(exc, (
        DependencyUnavailable, RedisConnectionError, RedisTimeoutError, ConnectionError,
        TimeoutError))


def database_outage_policy(
    budget_s: float, *, sleep: Sleep = time.sleep, what: str = "database call"
) -> Retrying:
    """Retry one database call of a running agent through an outage, for `budget_s` in all.

    For the calls of an agent's own attempt (store/outages.py), whose every write is
    safe to repeat under its attempt guard. Backoff doubles from 0.1 s up to 2 s, plus
    up to 0.1 s of jitter: a server back from a restart is found within ~2 s, and a
    worker's 200 agents do not reconnect in lock-step. `budget_s` ends a longer outage
    before another worker may take the agent over (Settings.outage_budget_s).
    """
    return Retrying(
        stop=stop_after_delay(budget_s),
        wait=wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.1),
        retry=retry_if_exception(is_database_outage),
        reraise=True,
        sleep=sleep,
        before_sleep=_log_retry(what, None),
    )


class McpServerDown(JarvisError):
    """Raised inside an MCP connection when its server could not start, stopped answering
    or was lost soon after it started; the restart policy tries again."""


def mcp_restart_policy(*, what: str, initial_s: float = 0.5, max_s: float = 30.0) -> AsyncRetrying:
    """Start an MCP server again, for as long as the process runs, on McpServerDown.

    Backoff doubles from `initial_s` up to `max_s`, plus up to `initial_s` of jitter: a
    server that crashes as it starts is not respawned in a tight loop, and one that
    comes back is found within `max_s`. Asynchronous: it runs on the process's MCP
    event loop (tools/mcp/loop.py), where a closing process cancels its sleep.
    """
    return AsyncRetrying(
        stop=stop_never,
        wait=wait_exponential(multiplier=initial_s, max=max_s) + wait_random(0, initial_s),
        retry=retry_if_exception_type(McpServerDown),
        reraise=True,
        before_sleep=_log_retry(what, None),
    )


def _log_retry(what: str, attempts: int | None) -> Callable[[RetryCallState], None]:
    # tenacity's before_sleep_log names the wrapped function, which an iterated
    # Retrying does not have ("Retrying <unknown> …"); say what is being retried.
    # A policy bounded by time (attempts None) says so once, then only at DEBUG: an
    # outage would otherwise log a line per agent per backoff.
    def log(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        wait_s = state.next_action.sleep if state.next_action is not None else 0.0
        if attempts is not None:
            logger.warning(
                "%s failed (attempt %d of %d): %s; retrying in %.2f s",
                what, state.attempt_number, attempts, failure, wait_s,
            )
            return
        logger.log(
            logging.WARNING if state.attempt_number == 1 else logging.DEBUG,
            "%s failed (attempt %d): %s; retrying in %.2f s", what, state.attempt_number,
            first_line(failure), wait_s,
        )

    return log

