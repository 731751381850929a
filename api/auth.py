"""Bearer API keys: every endpoint needs one, except those marked `public`.

A key is looked up by its SHA-256 (one indexed query) and the user is kept for
USER_TTL_S, so a burst of requests or a thousand streams opening at once cost the
database one lookup per key, not one per request.

That is also how long a key revoked or replaced by `jarvis-agents users revoke` or
`rotate` (another process) may still be taken by an API process: CONTRACT §1 gives
5 s. A short TTL rather than a revocation broadcast: it holds in every API process
whatever happens to Redis, and costs one indexed lookup per key per TTL.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from flask import Flask, current_app, g, request

from jarvis_agents.errors import RequestError
from jarvis_agents.store.users import User, Users

F = TypeVar("F", bound=Callable[..., object])

USER_TTL_S = 2.0
MAX_CACHED_KEYS = 10_000


class Unauthorized(RequestError):
    """Raised when a request has no API key, or one that belongs to nobody."""

    status = 401
    code = "unauthorized"


def public(view: F) -> F:
    """Mark a view as reachable without an API key."""
    view.public = True  # type: ignore[attr-defined]
    return view


class UserCache:
    """API key → user, each entry kept `ttl_s` seconds."""

    def __init__(self, users: Users, *, ttl_s: float = USER_TTL_S) -> None:
        self.users = users
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, tuple[float, User]] = OrderedDict()
        self._lock = threading.Lock()

    def user(self, api_key: str) -> User | None:
        digest = hashlib.sha256(api_key.encode("utf-8", "surrogateescape")).hexdigest()
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(digest)
            if entry is not None and entry[0] > now:
                return entry[1]
        user = self.users.by_api_key(api_key)
        if user is not None:
            with self._lock:
                self._entries[digest] = (now + self.ttl_s, user)
                self._entries.move_to_end(digest)
                while len(self._entries) > MAX_CACHED_KEYS:
                    self._entries.popitem(last=False)
        return user


def install(app: Flask, users: UserCache) -> None:
    """Check the key before every request to a protected endpoint."""

    @app.before_request
    def _authenticate() -> None:
        if request.routing_exception is not None:
            return  # an unknown path or method: its 404/405 says more than a 401
        view = current_app.view_functions.get(request.endpoint or "")
        if view is None or getattr(view, "public", False):
            return
        g.user = _user_from_header(users)


def _user_from_header(users: UserCache) -> User:
    header = request.headers.get("Authorization", "")
    scheme, _, api_key = header.strip().partition(" ")
    if not header:
        raise Unauthorized("this endpoint needs an API key: send `Authorization: Bearer <key>`")
    if scheme.lower() != "bearer" or not api_key.strip():
        raise Unauthorized("the Authorization header must be `Bearer <api key>`")
    user = users.user(api_key.strip())
    if user is None:
        raise Unauthorized("the API key is not valid")
    return user


def current_user() -> User:
    return g.user
