"""One webhook try over HTTP: to the address that was checked, the name kept for the
receiver and for TLS, and the answer read no further than a few KiB.

The host is resolved and checked before every try (webhooks/addresses.py) and the
request goes to the address that passed (a urllib3 pool per name and address), with the
`Host` header and the TLS server name (`server_hostname`: SNI, and the name the
certificate is verified against) still the URL's name. No redirect is followed and no
proxy is used: either would reach an address nobody checked. urllib3 rather than httpx:
a try costs about half the CPU (0.3 against 0.8 ms per POST on our hardware), taken from
the worker processes that run the agents.
"""

from __future__ import annotations

import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass

import urllib3
from urllib3.exceptions import HTTPError

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import storable
from jarvis_agents.webhooks.addresses import Resolver, Target, resolve_target, system_resolver

# A try's answer is read up to this much: enough to log why a receiver refused.
READ_LIMIT_BYTES = 4096
# Connecting, sending and each read are bounded; the dispatcher's lease
# (webhooks/dispatcher.py) is longer than a try that takes all of them.
TIMEOUT = urllib3.Timeout(connect=5.0, read=5.0)
# Pools (one per host name and address) kept; the least recently used beyond that are closed.
KEPT_POOLS = 32
_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class TryOutcome:
    delivered: bool
    error: str | None = None  # why not, for the delivery's last_error


class WebhookSender:
    """POSTs webhook bodies to checked, pinned addresses."""

    def __init__(
        self, *, allow_private: bool, resolver: Resolver = system_resolver,
        verify: ssl.SSLContext | None = None, timeout: urllib3.Timeout = TIMEOUT,
        senders: int = 8,
    ) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        # One context for every connection (building one reads the CA bundle): the
        # system's CAs (OpenSSL's defaults, which SSL_CERT_FILE / SSL_CERT_DIR override).
        self.verify = verify or ssl.create_default_context()
        self.timeout = timeout
        self.senders = senders
        self._pools: OrderedDict[tuple[str, str, str], urllib3.HTTPConnectionPool] = OrderedDict()
        self._lock = threading.Lock()

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> TryOutcome:
        """One try; never raises for what the receiver or the network does."""
        try:
            target = resolve_target(url, allow_private=self.allow_private, resolver=self.resolver)
        except RequestError as exc:
            return TryOutcome(False, f"refused: {exc}")
        try:
            response = self._pool(target).urlopen(
                "POST", target.url.raw_path.decode("ascii"), body=body,
                headers={**headers, "Host": target.host_header}, retries=False, redirect=False,
                assert_same_host=False, preload_content=False,
            )
            try:
                head = response.read(READ_LIMIT_BYTES, decode_content=False)
            finally:
                if response.length_remaining == 0:
                    response.release_conn()  # read to its end: the connection can be reused
                else:
                    response.close()  # the rest is never read: the connection goes
        except (HTTPError, OSError) as exc:
            return TryOutcome(False, f"{type(exc).__name__}: {exc}"[:500])
        if 200 <= response.status < 300:
            return TryOutcome(True)
        text = storable(head.decode("utf-8", "replace")).strip()[:200]
        return TryOutcome(False, f"HTTP {response.status}" + (f": {text}" if text else ""))

    def _pool(self, target: Target) -> urllib3.HTTPConnectionPool:
        scheme = target.url.scheme
        key = (scheme, target.host_header, str(target.address))
        with self._lock:
            pool = self._pools.pop(key, None)
            if pool is None:
                options = {"port": target.url.port or _PORTS[scheme], "maxsize": self.senders,
                           "timeout": self.timeout, "retries": False}
                pool = (
                    urllib3.HTTPSConnectionPool(
                        str(target.address), ssl_context=self.verify,
                        server_hostname=target.server_name, **options)
                    if scheme == "https"
                    else urllib3.HTTPConnectionPool(str(target.address), **options)
                )
            self._pools[key] = pool  # the most recently used last
            stale = []
            while len(self._pools) > KEPT_POOLS:
                stale.append(self._pools.popitem(last=False)[1])
        for old in stale:
            old.close()  # a try still using it fails and is retried
        return pool

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            pool.close()
