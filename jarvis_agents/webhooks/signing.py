"""The headers of one webhook try: the event, our signature and Standard Webhooks' (docs/api.md §9).

`X-Jarvis-Signature: sha256=<hex>` is the HMAC-SHA256 of the raw body keyed with
JARVIS_WEBHOOK_SECRET. `webhook-signature` is Standard Webhooks' `v1,<base64>` of
"{webhook-id}.{webhook-timestamp}.{body}", made by the `standardwebhooks` package: keyed
with the base64-decoded rest of a secret that starts `whsec_` (its own secret format),
else with the secret's bytes (the package takes a plain string for base64, so it is given
the bytes). The body is ASCII JSON, so its text and its bytes sign alike.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import datetime

from standardwebhooks import Webhook

WHSEC_PREFIX = "whsec_"


class Signer:
    """Signs webhook bodies with one secret."""

    def __init__(self, secret: str) -> None:
        self._key = secret.encode()
        self._standard = Webhook(secret if secret.startswith(WHSEC_PREFIX) else secret.encode())

    def headers(
        self, *, delivery_id: uuid.UUID, event: str, agent_id: uuid.UUID, body: bytes,
        now: datetime,
    ) -> dict[str, str]:
        """Every header of one try; `now` is its webhook-timestamp."""
        message_id = str(delivery_id)
        return {
            "Content-Type": "application/json",
            "X-Jarvis-Event": event,
            "X-Jarvis-Signature": self.jarvis_signature(body),
            "X-Jarvis-Agent-Id": str(agent_id),
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._standard.sign(message_id, now, body.decode()),
        }

    def jarvis_signature(self, body: bytes) -> str:
        return "sha256=" + hmac.new(self._key, body, hashlib.sha256).hexdigest()
