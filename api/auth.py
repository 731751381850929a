"""Bearer API keys: every endpoint needs one, except those marked `public`.

Who a key belongs to, and for how long that answer is kept, is the core's business
(jarvis_agents/accounts.py); this module reads the header and says 401.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import Flask, current_app, g, request

from jarvis_agents.accounts import ApiKeys
from jarvis_agents.errors import RequestError
from jarvis_agents.store.users import User

F = TypeVar("F", bound=Callable[..., object])


class Unauthorized(RequestError):
    """Raised when a request has no API key, or one that belongs to nobody."""

    status = 401
    code = "unauthorized"


def public(view: F) -> F:
    """Mark a view as reachable without an API key."""
    view.public = True  # type: ignore[attr-defined]
    return view


def install(app: Flask, keys: ApiKeys, *, key_headers: dict[str, str] | None = None) -> None:
    """Check the key before every request to a protected endpoint. `key_headers` names,
    per blueprint, a header its clients send the bare key in (LangGraph's `x-api-key`)."""
    key_headers = key_headers or {}

    @app.before_request
    def _authenticate() -> None:
        if request.routing_exception is not None:
            return  # an unknown path or method: its 404/405 says more than a 401
        view = current_app.view_functions.get(request.endpoint or "")
        if view is None or getattr(view, "public", False):
            return
        g.api_key = _key_from_header(key_headers.get(request.blueprint or ""))
        user = keys.user(g.api_key)
        if user is None:
            raise Unauthorized("the API key is not valid")
        g.user = user


def _key_from_header(bare_header: str | None = None) -> str:
    if bare_header is not None and request.headers.get(bare_header, "").strip():
        return request.headers[bare_header].strip()
    header = request.headers.get("Authorization", "")
    scheme, _, api_key = header.strip().partition(" ")
    if not header:
        raise Unauthorized("this endpoint needs an API key: send `Authorization: Bearer <key>`")
    if scheme.lower() != "bearer" or not api_key.strip():
        raise Unauthorized("the Authorization header must be `Bearer <api key>`")
    return api_key.strip()


def current_user() -> User:
    return g.user


def current_api_key() -> str:
    """The key the request was let in with (a stream watches it: accounts.KeyWatch)."""
    return g.api_key


def revoked_meanwhile() -> Unauthorized:
    """The 401 of a long-poll whose key was revoked or replaced while it waited."""
    return Unauthorized("the API key was revoked or replaced while this request waited")
