"""The CLI client's failures, each one sentence a person can act on: ApiError for an
answer with an error status, ApiUnreachable when nothing answers."""

from __future__ import annotations

import re

import httpx

from jarvis_agents.errors import DependencyUnavailable, JarvisError

UNREACHABLE_HINT = "is `jarvis-agents up` running?"
BAD_KEY = "the API key was refused (set JARVIS_API_KEY or run `jarvis-agents up`)"


class ApiError(JarvisError):
    """Raised when the API answers a request with an error status (4xx or 5xx)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ApiUnreachable(DependencyUnavailable):
    """Raised when the API cannot be reached, or the connection to it is lost."""


def api_error(response: httpx.Response, agent_id: str | None) -> ApiError:
    status = response.status_code
    code, message = "http_error", ""
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        pass
    if status == 401:
        return ApiError(status, code if code != "http_error" else "unauthorized", BAD_KEY)
    if status == 404 and agent_id is not None:
        return ApiError(status, code if code != "http_error" else "not_found", f"no agent with id {agent_id}")
    if not message:
        message = f"the API answered {status} {response.reason_phrase}".rstrip()
    if status == 429 and response.headers.get("Retry-After"):
        message = f"{message} (retry after {response.headers['Retry-After']} s)"
    return ApiError(status, code, message)


def transport_error(exc: httpx.TransportError, base_url: str) -> ApiUnreachable:
    if isinstance(exc, httpx.TimeoutException):
        return ApiUnreachable(f"the jarvis-agents API at {base_url} did not answer in time ({reason(exc)})")
    if isinstance(exc, httpx.ConnectError):
        return ApiUnreachable(
            f"cannot reach the jarvis-agents API at {base_url}: {reason(exc)} ({UNREACHABLE_HINT})"
        )
    return ApiUnreachable(f"lost the connection to the jarvis-agents API at {base_url}: {reason(exc)}")


def reason(exc: Exception) -> str:
    """`[Errno 111] Connection refused` → `connection refused`."""
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc).strip()) or type(exc).__name__
    return text[:1].lower() + text[1:]
