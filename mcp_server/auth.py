"""The API key as `Authorization: Bearer` (README, MCP server): who calls, or a 401.

The SDK's bearer backend reads the header and asks `KeyVerifier` (the core's key
lookup, `jarvis_agents.accounts`); the request then carries the SDK's
`AuthenticatedUser`, whose `client_id` is the user's id, and a stateful session stays
bound to the key that opened it. `RequireKey` answers the 401 as the API does.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio.to_thread
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Receive, Scope, Send

from jarvis_agents.accounts import ApiKeys


class KeyVerifier:
    """The SDK's `TokenVerifier` over our API keys."""

    def __init__(self, keys: ApiKeys) -> None:
        self.keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        user = await anyio.to_thread.run_sync(self.keys.user, token.strip())
        if user is None:
            return None
        return AccessToken(token=token, client_id=str(user.id), scopes=[])


def caller_id(user: Any) -> uuid.UUID:
    """The id of the user a request was let in as (`RequireKey` has let it in)."""
    if not isinstance(user, AuthenticatedUser):
        raise PermissionError("the request was not authenticated")
    return uuid.UUID(user.access_token.client_id)


class RequireKey:
    """Lets a request through once its key has found its user; else a JSON 401."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if isinstance(scope.get("user"), AuthenticatedUser):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        header = headers.get(b"authorization", b"").decode("latin-1").strip()
        if not header:
            message = "this endpoint needs an API key: send `Authorization: Bearer <key>`"
        elif not header.lower().startswith("bearer ") or not header[7:].strip():
            message = "the Authorization header must be `Bearer <api key>`"
        else:
            message = "the API key is not valid"
        body = json.dumps({"error": {"code": "unauthorized", "message": message}}).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b'Bearer error="invalid_token"')]})
        await send({"type": "http.response.body", "body": body})
