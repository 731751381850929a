"""One webhook try over HTTP: to the address that was checked, the name kept for the
receiver and for TLS, and the answer read no further than a few KiB.

The host is resolved and checked before every try (webhooks/addresses.py) and the
request goes to the address that passed, with `Host` and the TLS server name (httpx's
`sni_hostname` extension; the certificate is verified against it) still the URL's name.
Connections are kept alive per host name, never shared between two names, so a TLS
connection is only ever used for the name its certificate was checked against. No
redirect is followed and no proxy from the environment is used: either would reach an
address nobody checked.
"""

from __future__ import annotations

import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass

import httpx

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import storable
from jarvis_agents.webhooks.addresses import Resolver, Target, resolve_target, system_resolver

# A try's answer is read up to this much: enough to log why a receiver refused.
READ_LIMIT_BYTES = 4096
# Each phase of a try (connect, send, each read) is bounded; the dispatcher's lease
# (webhooks/dispatcher.py) is longer than a try that takes all of them.
TIMEOUT = httpx.Timeout(5.0, pool=2.0)
# Host names whose connections are kept; the least recently used beyond that are closed.
KEPT_HOSTS = 32


@dataclass(frozen=True)
class TryOutcome:
    delivered: bool
    error: str | None = None  # why not, for the delivery's last_error


class WebhookSender:
    """POSTs webhook bodies to checked, pinned addresses."""

    def __init__(
        self, *, allow_private: bool, resolver: Resolver = system_resolver,
        verify: ssl.SSLContext | None = None, timeout: httpx.Timeout = TIMEOUT,
        senders: int = 8,
    ) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        # One context for every connection (building one reads the CA bundle); httpx's
        # own default: certifi's CAs, or SSL_CERT_FILE / SSL_CERT_DIR when set.
        self.verify = verify or httpx.create_ssl_context()
        self.timeout = timeout
        self.senders = senders
        self._clients: OrderedDict[tuple[str, str], httpx.Client] = OrderedDict()
        self._lock = threading.Lock()

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> TryOutcome:
        """One try; never raises for what the receiver or the network does."""
        try:
            target = resolve_target(url, allow_private=self.allow_private, resolver=self.resolver)
        except RequestError as exc:
            return TryOutcome(False, f"refused: {exc}")
        extensions = {"sni_hostname": target.server_name} if target.server_name else {}
        try:
            with self._client(target).stream(
                "POST", target.url, content=body, extensions=extensions,
                headers={**headers, "Host": target.host_header},
            ) as response:
                head = _read_at_most(response, READ_LIMIT_BYTES)
        except httpx.HTTPError as exc:
            return TryOutcome(False, f"{type(exc).__name__}: {exc}"[:500])
        if response.is_success:
            return TryOutcome(True)
        text = storable(head.decode("utf-8", "replace")).strip()[:200]
        return TryOutcome(False, f"HTTP {response.status_code}" + (f": {text}" if text else ""))

    def _client(self, target: Target) -> httpx.Client:
        key = (target.url.scheme, target.host_header)  # the name and its port
        with self._lock:
            client = self._clients.pop(key, None)
            if client is None:
                client = httpx.Client(
                    verify=self.verify, timeout=self.timeout, trust_env=False,
                    follow_redirects=False,
                    limits=httpx.Limits(max_connections=self.senders,
                                        max_keepalive_connections=self.senders),
                )
            self._clients[key] = client  # the most recently used last
            stale = []
            while len(self._clients) > KEPT_HOSTS:
                stale.append(self._clients.popitem(last=False)[1])
        for old in stale:
            old.close()  # a try still using it fails and is retried
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            client.close()


def _read_at_most(response: httpx.Response, limit: int) -> bytes:
    """Up to `limit` bytes of the body, as sent (not decompressed); the rest is never read,
    and a connection whose answer was not read to its end is closed, not reused."""
    head = b""
    for chunk in response.iter_raw():
        head += chunk
        if len(head) >= limit:
            break
    return head[:limit]
