"""Every error is JSON: `{"error": {"code": "<snake_case>", "message": "<sentence>"}}`.

Werkzeug's own HTTP errors (404, 405, 413 …) included: a client never sees an HTML
page or a traceback. An unreachable database or Redis is a 503 the client may retry.
"""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from jarvis_agents.errors import DependencyUnavailable, RateLimited, RequestError

log = logging.getLogger(__name__)

RETRY_AFTER_UNAVAILABLE_S = 5

# The code and a better sentence than Werkzeug's for each HTTP error it raises itself.
HTTP_ERRORS: dict[int, tuple[str, str]] = {
    400: ("bad_request", "the request is malformed"),
    401: ("unauthorized", "a valid API key is required"),
    403: ("forbidden", "this request is not allowed"),
    404: ("not_found", "there is no such endpoint; the API is described at /api/v1/openapi.json"),
    405: ("method_not_allowed", "this method is not allowed here"),
    406: ("not_acceptable", "the requested representation is not available"),
    408: ("request_timeout", "the request took too long to arrive"),
    411: ("length_required", "a Content-Length header is required"),
    413: ("payload_too_large", "the request body is too large (the limit is 64 KiB)"),
    414: ("uri_too_long", "the request URL is too long"),
    415: ("unsupported_media_type", "send the body as application/json"),
    416: ("range_not_satisfiable", "the requested range cannot be served"),
    422: ("unprocessable_entity", "the request could not be processed"),
    429: ("too_many_requests", "too many requests; slow down"),
    431: ("headers_too_large", "the request headers are too large"),
    500: ("internal_error", "an internal error occurred; it has been logged"),
    501: ("not_implemented", "this method is not implemented"),
    503: ("service_unavailable", "the service is temporarily unavailable; retry shortly"),
}


def error_response(status: int, code: str, message: str) -> Response:
    response = jsonify({"error": {"code": code, "message": message}})
    response.status_code = status
    return response


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(RequestError, _request_error)
    app.register_error_handler(DependencyUnavailable, _unavailable)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)


def _request_error(exc: RequestError) -> Response:
    response = error_response(exc.status, exc.code, str(exc))
    if isinstance(exc, RateLimited):
        response.headers["Retry-After"] = str(max(1, int(exc.retry_after_s)))
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="jarvis-agents"'
    return response


def _unavailable(exc: Exception) -> Response:
    response = error_response(503, "service_unavailable", _sentence(exc))
    response.headers["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE_S)
    return response


def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    code, message = HTTP_ERRORS.get(status, (snake_case(exc.name), exc.description or exc.name))
    if status == 404:
        message = f"there is no endpoint at {request.path}; the API is described at /api/v1/openapi.json"
    elif status == 405:
        allowed = ", ".join(sorted(getattr(exc, "valid_methods", None) or []))
        message = f"{request.method} is not allowed on {request.path}" + (
            f"; allowed: {allowed}" if allowed else ""
        )
    response = error_response(status, code, message)
    # Keep what Werkzeug says in headers (Allow on a 405, WWW-Authenticate …).
    for name, value in exc.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def _unexpected(exc: Exception) -> Response:
    if _is_unavailable(exc):
        log.warning("dependency unavailable during %s %s: %s", request.method, request.path, exc)
        return _unavailable(exc)
    log.exception("unhandled error in %s %s", request.method, request.path)
    code, message = HTTP_ERRORS[500]
    return error_response(500, code, message)


def _is_unavailable(exc: Exception) -> bool:
    """SQLAlchemy's OperationalError or pool timeout, or a Redis connection failure."""
    try:
        from sqlalchemy.exc import DisconnectionError, OperationalError
        from sqlalchemy.exc import TimeoutError as PoolTimeout
    except ImportError:  # pragma: no cover
        return False
    import redis

    return isinstance(
        exc,
        (OperationalError, PoolTimeout, DisconnectionError, redis.ConnectionError,
         redis.TimeoutError, ConnectionError),
    )


def _sentence(exc: Exception) -> str:
    if isinstance(exc, DependencyUnavailable):
        return str(exc)
    name = "the database" if "sqlalchemy" in type(exc).__module__ else "Redis"
    if isinstance(exc, ConnectionError) and "redis" not in type(exc).__module__:
        name = "a dependency"
    return f"{name} is unreachable right now; retry shortly"


def snake_case(name: str) -> str:
    """An HTTP reason phrase as an error code: "Request Timeout" → "request_timeout"."""
    return "_".join(name.lower().replace("-", " ").split())
