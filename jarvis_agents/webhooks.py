"""Webhooks: the agent JSON POSTed to the caller's URL when the agent ends.

Signed with HMAC-SHA256 of the raw body (`X-Jarvis-Signature: sha256=<hex>`).
URLs that resolve to loopback, private or link-local addresses are refused at
create time unless the operator allows them. Delivery never changes the agent.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import uuid
from urllib.parse import urlsplit

import httpx

from jarvis_agents.config import Settings
from jarvis_agents.errors import RequestError
from jarvis_agents.store.repository import Repository

log = logging.getLogger(__name__)

# Seconds to wait before each retry: the first within 10 s, six tries over ~9 min.
RETRY_DELAYS_S = (5, 30, 60, 120, 300)


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def check_webhook_url(url: str, settings: Settings) -> None:
    """Raise RequestError unless the URL may receive this deployment's webhooks."""
    if not settings.webhook_secret:
        raise RequestError(
            "webhooks are not enabled on this server (JARVIS_WEBHOOK_SECRET is not set)",
            code="webhooks_disabled",
        )
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise RequestError("webhook_url must be an http(s) URL", code="invalid_webhook_url")
    if settings.webhook_allow_private:
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise RequestError(
            f"webhook_url host {parts.hostname!r} does not resolve", code="invalid_webhook_url"
        ) from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if (address.is_private or address.is_loopback or address.is_link_local
                or address.is_reserved or address.is_multicast or address.is_unspecified):
            raise RequestError(
                f"webhook_url resolves to a non-public address ({address}); "
                "the operator can allow this with JARVIS_WEBHOOK_ALLOW_PRIVATE=1",
                code="webhook_url_not_allowed",
            )


class WebhookSender:
    def __init__(self, *, repository: Repository, settings: Settings,
                 http: httpx.Client | None = None) -> None:
        self.repository = repository
        self.settings = settings
        self.http = http or httpx.Client(timeout=httpx.Timeout(10.0, connect=5.0))

    def deliver(self, agent_id: uuid.UUID) -> bool:
        """POST the agent once; True when the receiver answered 2xx."""
        agent = self.repository.get(agent_id)
        if agent is None or not agent.webhook_url or not self.settings.webhook_secret:
            return True  # nothing to deliver: not a failure worth retrying
        body = json.dumps(agent.to_json(), separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Jarvis-Signature": sign(self.settings.webhook_secret, body),
            "X-Jarvis-Agent-Id": str(agent.id),
        }
        try:
            response = self.http.post(agent.webhook_url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.warning("webhook of agent %s failed: %s", agent_id, exc)
            return False
        if response.is_success:
            return True
        log.warning("webhook of agent %s answered %s", agent_id, response.status_code)
        return False
