"""One webhook try over HTTP: to the address that was checked, the name kept for the
receiver and for TLS, the answer read no further than a few KiB, and the whole try
over within TRY_DEADLINE_S however the receiver trickles (webhooks/deadlines.py).

The host is resolved and checked before every try (webhooks/addresses.py) and the
request goes to the address that passed, with the `Host` header and the TLS server name
(SNI, and the name the certificate is verified against) still the URL's name. No
redirect is followed and no proxy is used: either would reach an address nobody
checked. The standard library's http.client, with our own keep-alive connections (a
few per name and address), rather than urllib3 or httpx: a try costs the worker a
fraction of their CPU (BENCHMARKS.md, notes: webhooks), CPU taken from the processes
that run the agents.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import storable
from jarvis_agents.webhooks.addresses import Resolver, Target, resolve_target, system_resolver
from jarvis_agents.webhooks.deadlines import Deadlines

# A try's answer is read up to this much: enough to log why a receiver refused.
READ_LIMIT_BYTES = 4096
# A try lasts at most this long in all, from its start: the name's lookup (which counts
# but is not cut short: the system's resolver has time-outs of its own), connecting,
# sending, and reading the answer's head (and what is read of its body), however the
# receiver trickles (README, Webhooks). The dispatcher's lease (webhooks/dispatcher.py)
# is longer than a try that takes all of it.
TRY_DEADLINE_S = 10.0
# Addresses (host name and address) whose idle connections are kept; the least recently
# used beyond that are closed. Each keeps at most as many as there are senders.
KEPT_POOLS = 32
_PORTS = {"http": 80, "https": 443}

_Key = tuple[str, str, str, int]  # scheme, Host header, address, port


@dataclass(frozen=True)
class TryOutcome:
    delivered: bool
    error: str | None = None  # why not, for the delivery's last_error
    seconds: float = 0.0  # how long the try took


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to a checked address, with the URL's name as TLS server name."""

    def __init__(
        self, address: str, port: int, *, server_name: str, context: ssl.SSLContext,
        timeout: float,
    ) -> None:
        super().__init__(address, port, timeout=timeout, context=context)
        self.server_name = server_name
        self.tls = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP to the address
        self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.server_name)


class WebhookSender:
    """POSTs webhook bodies to checked, pinned addresses."""

    def __init__(
        self, *, allow_private: bool, resolver: Resolver = system_resolver,
        verify: ssl.SSLContext | None = None, deadline_s: float = TRY_DEADLINE_S,
        senders: int = 8,
    ) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        # One context for every connection (building one reads the CA bundle): the
        # system's CAs (OpenSSL's defaults, which SSL_CERT_FILE / SSL_CERT_DIR override).
        self.verify = verify or ssl.create_default_context()
        self.deadline_s = deadline_s
        self.senders = senders
        self._idle: OrderedDict[_Key, list[http.client.HTTPConnection]] = OrderedDict()
        self._lock = threading.Lock()
        self._deadlines = Deadlines()

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> TryOutcome:
        """One try, over within `deadline_s`; never raises for what the receiver or the
        network does."""
        start = time.monotonic()
        try:
            target = resolve_target(url, allow_private=self.allow_private, resolver=self.resolver)
        except RequestError as exc:
            return TryOutcome(False, f"refused: {exc}", time.monotonic() - start)
        left = self.deadline_s - (time.monotonic() - start)
        if left <= 0:  # the lookup took it all
            return TryOutcome(False, self._timed_out(), time.monotonic() - start)
        key = (target.url.scheme, target.host_header, str(target.address),
               target.url.port or _PORTS[target.url.scheme])
        connection = self._take(key, target, connect_s=left)
        response: http.client.HTTPResponse | None = None
        head, failure = b"", None
        with self._deadlines.bounded(lambda: connection.sock, left) as watch:
            try:
                connection.request("POST", target.url.raw_path.decode("ascii"), body=body,
                                   headers={**headers, "Host": target.host_header})
                response = connection.getresponse()
                head = response.read(READ_LIMIT_BYTES)
            except (http.client.HTTPException, OSError, ValueError) as exc:
                # ValueError: what an SSL socket raises once shut down at the deadline.
                failure = exc
        seconds = time.monotonic() - start
        if response is None:
            connection.close()
            if watch.expired or isinstance(failure, TimeoutError):
                return TryOutcome(False, self._timed_out(), seconds)
            return TryOutcome(False, f"{type(failure).__name__}: {failure}"[:500], seconds)
        if failure is None and not watch.expired and response.isclosed() and not response.will_close:
            self._give_back(key, connection)  # read to its end: the connection can be reused
        else:
            connection.close()  # the rest is never read, or the receiver closes it
        if 200 <= response.status < 300:  # its head said so, whatever became of its body
            return TryOutcome(True, seconds=seconds)
        text = storable(head.decode("utf-8", "replace")).strip()[:200]
        return TryOutcome(False, f"HTTP {response.status}" + (f": {text}" if text else ""), seconds)

    def _timed_out(self) -> str:
        return f"timed out: no answer within {self.deadline_s:g} s"

    def _take(self, key: _Key, target: Target, *, connect_s: float) -> http.client.HTTPConnection:
        """An idle connection to that address that the receiver has not closed, or a new one
        (whose connect, not yet watched for want of a socket, times out after `connect_s`)."""
        with self._lock:
            idle = self._idle.get(key, [])
            while idle:
                connection = idle.pop()
                if _still_open(connection):
                    return connection
                connection.close()
        _, _, address, port = key
        if target.url.scheme == "https":
            return _PinnedHTTPS(address, port, server_name=target.server_name or address,
                                context=self.verify, timeout=connect_s)
        return http.client.HTTPConnection(address, port, timeout=connect_s)

    def _give_back(self, key: _Key, connection: http.client.HTTPConnection) -> None:
        stale: list[http.client.HTTPConnection] = []
        with self._lock:
            idle = self._idle.pop(key, [])
            self._idle[key] = idle  # the most recently used last
            if len(idle) < self.senders:
                idle.append(connection)
            else:
                stale.append(connection)
            while len(self._idle) > KEPT_POOLS:
                stale.extend(self._idle.popitem(last=False)[1])
        for old in stale:
            old.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle.values()), OrderedDict()
        for connections in idle:
            for connection in connections:
                connection.close()
        self._deadlines.close()


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept connection may carry the next try: connected, and nothing to read
    (an idle keep-alive connection becomes readable only when the receiver closed it).
    poll, not select: a worker of a thousand threads holds descriptors past select's 1023."""
    if connection.sock is None:
        return False
    poller = select.poll()
    try:
        poller.register(connection.sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False
