"""One error tree for the whole system, grouped by who must act on it."""

from __future__ import annotations


def first_line(exc: BaseException | None) -> str:
    """An error's message as one line of a log or of a CLI error: its first line, or
    its type's name (a database error's message goes on with the SQL and its values)."""
    text = str(exc or "").strip()
    return text.splitlines()[0] if text else type(exc).__name__


def internal_error(exc: BaseException) -> str:
    """The `error` of an agent that a bug of ours (`exc`) failed: its type and message."""
    kind, message = type(exc).__name__, first_line(exc)
    return f"internal error: {kind}" + (f": {message}" if message != kind else "")


class JarvisError(Exception):
    """Raised for every failure the system itself recognises; the base of the tree."""


# --- the operator must act -------------------------------------------------------


class ConfigError(JarvisError):
    """Raised when the environment holds a missing or malformed setting."""


class DependencyUnavailable(JarvisError):
    """Raised when a service the system needs (database, Redis) cannot be reached."""


# --- the API client must act -----------------------------------------------------


class RequestError(JarvisError):
    """Raised when a request is malformed; the API answers it with a 4xx."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFound(RequestError):
    """Raised when an agent or user does not exist, or belongs to someone else."""

    status = 404
    code = "not_found"


class Conflict(RequestError):
    """Raised when a request conflicts with the current state (a terminal agent, a reused key)."""

    status = 409
    code = "conflict"


class RateLimited(RequestError):
    """Raised when a user has too many agents PENDING or RUNNING, or streams open, at once."""

    status = 429
    code = "too_many_active_agents"

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: int = 5) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


# --- the domain refuses ----------------------------------------------------------


class InvalidTransition(JarvisError):
    """Raised when an agent is asked to move between two statuses the lifecycle forbids."""

    def __init__(self, current: str, target: str) -> None:
        super().__init__(f"an agent cannot go from {current} to {target}")
        self.current = current
        self.target = target


class StaleAttempt(JarvisError):
    """Raised when a write comes from an execution attempt that no longer owns the agent."""


# --- the run fails ---------------------------------------------------------------


class ModelError(JarvisError):
    """Raised when the model cannot produce a reply; it fails the agent with `model_error`."""


class ModelUnavailable(ModelError):
    """Raised when the model server stays unreachable or erroring after every retry."""


class ModelNotFound(ModelError):
    """Raised when the model server does not know the requested model (never retried)."""

    def __init__(self, model: str, message: str | None = None) -> None:
        super().__init__(
            message or f"the model '{model}' is not available on the Ollama server; "
            f"pull it with `ollama pull {model}` or choose another model"
        )
        self.model = model


class StepTimeout(JarvisError):
    """Raised when one planning call takes longer than the step timeout."""


class Cancelled(JarvisError):
    """Raised inside the loop when the agent's cancellation has been observed."""


# --- the model must act ----------------------------------------------------------


class ToolError(JarvisError):
    """Raised by a tool for a failure the model can act on; it becomes an observation."""
