"""Model calls over HTTP: a POST whose reply streams in, cut short when it must be.

A model adapter POSTs its request with `StreamingClient.post` and reads the response
as it arrives, on its own thread. A cancellation or the step deadline cuts the read,
even one waiting on a silent server, within ~100 ms: another thread shuts the call's
socket down (`jarvis_agents.llm.interrupts`). Only a TCP connect that hangs (a host
that drops the packets) is not cut: it ends at the connect timeout.

Every call borrows a kept-alive connection of its own, the most recently returned
first, and gives it back once the response was read to its end: one lock held for a
list operation per call, with 1 or 300 connections. The sockets are opened here, so
that a cut reaches them before the TLS handshake and before the response head, and
go where the environment says (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, less NO_PROXY,
read by urllib): an absolute URL through an http proxy, a CONNECT tunnel for https.
The request and the response on them are `jarvis_agents.llm.wire`'s (why: there).
"""

from __future__ import annotations

import base64
import re
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

from jarvis_agents.errors import Cancelled, ModelError
from jarvis_agents.llm import wire
from jarvis_agents.llm.interrupts import WATCHDOG, Call, Interrupts
from jarvis_agents.retry import TransientModelError

# A read timeout that ends at the step deadline should find the deadline passed.
_DEADLINE_MARGIN_S = 0.005


@dataclass(eq=False)
class _Line:
    """A kept-alive connection (no socket before the first call or after a close), and
    how to tell that its server closed it while it was idle."""

    sock: socket.socket | None = None
    idle_check: select.poll | None = None  # not select(): descriptors may pass 1024

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = self.idle_check = None


class StreamingClient:
    """POSTs to one server, each on a kept-alive connection of its own (see the module)."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._url = url
        self._tls = url.scheme == "https"
        self._port = url.port or (443 if self._tls else 80)
        self._route = _route(url, self._port)
        self._host = url.netloc.rpartition("@")[2]  # the Host header
        self._headers = {**headers, **({} if self._route.tunnel else self._route.proxy_headers),
                         "Accept-Encoding": "identity"}
        self._idle: list[_Line] = []
        self._lock = threading.Lock()
        self._closed = False
        self._tls_context_made: ssl.SSLContext | None = None

    @contextmanager
    def post(
        self, path: str, body: bytes, interrupts: Interrupts, *,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[wire.Response]:
        """POST `body` to `path` (relative to the base URL) and yield the response, its
        body still to read. `headers` are sent besides the client's own.

        Raises Cancelled or StepTimeout when a cancellation or the deadline cut the
        call (the block's own errors included: a cut reply may end in any of them), and
        TransientModelError when the server could not be reached, went silent for the
        read timeout or broke the connection. Every wait ends at the deadline. A
        response the block leaves unread closes its connection; one read to its end
        leaves it open for the next call.
        """
        call = Call()

        def woken() -> None:
            if interrupts.should_stop():
                call.abandon()

        with interrupts.waking(woken), WATCHDOG.watching(call, interrupts), \
                self._lend() as line:
            interrupts.check()
            response: wire.Response | None = None
            try:
                left_s = max(interrupts.deadline - time.monotonic(), 0.0) + _DEADLINE_MARGIN_S
                sock = self._open(line, call, timeout_s=min(self.connect_timeout_s, left_s))
                sock.settimeout(min(self.read_timeout_s, left_s))
                try:
                    wire.send(sock, "POST", f"{self._route.target_prefix}/{path}",
                              host=self._host, body=body, headers=self._headers if headers is None
                              else {**headers, **self._headers})
                    response = wire.Response(sock)
                    yield response
                except TimeoutError as exc:
                    raise TransientModelError(
                        f"no data for {self.read_timeout_s:g} s (read timeout)") from exc
                except (OSError, wire.ProtocolError) as exc:
                    raise TransientModelError(f"the connection broke mid-reply: {reason(exc)}") from exc
            except Exception:
                if time.monotonic() >= interrupts.deadline:
                    interrupts.check()
                if call.abandoned:  # only ever for a should_stop() seen True, or the deadline
                    raise Cancelled("the agent was cancelled while waiting for the model") from None
                raise
            finally:
                # Let go before the connection is lent again: a cancellation of this call
                # that lands late must not cut the next borrower's reply. A connection
                # this call cut, or whose response was not read to its end (an error
                # answer read whole is), is not kept.
                if call.detach() or response is None or not response.reusable:
                    line.close()

    def close(self) -> None:
        """Close the idle connections now and each lent one when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for line in idle:
            line.close()

    # --- connections -----------------------------------------------------------------

    @contextmanager
    def _lend(self) -> Iterator[_Line]:
        """A connection for the block's duration: the most recently returned one first."""
        with self._lock:
            line = self._idle.pop() if self._idle else None
        if line is None:
            line = _Line()
        try:
            yield line
        finally:
            with self._lock:
                keep = not self._closed
                if keep:
                    self._idle.append(line)
            if not keep:
                line.close()

    def _open(self, line: _Line, call: Call, *, timeout_s: float) -> socket.socket:
        """The connection's socket: the kept one, unless its server closed it, or a new one."""
        if line.sock is not None and line.idle_check is not None:
            # Readable while idle means the server closed it (or sent something unasked).
            if not line.idle_check.poll(0):
                call.attach(line.sock)
                return line.sock
            line.close()
        if self._route.proxy_scheme != "http":
            raise ModelError(
                f"the environment names a {self._route.proxy_scheme}:// proxy for "
                f"{self._url.geturl()}; the model client speaks to http:// proxies only")
        try:
            sock = socket.create_connection(self._route.peer, timeout=timeout_s)
        except TimeoutError as exc:
            raise TransientModelError(
                f"no connection within {timeout_s:g} s", unreachable=True) from exc
        except OSError as exc:
            raise TransientModelError(reason(exc), unreachable=True) from exc
        try:
            call.attach(sock)  # a cancel cuts the tunnel's and the TLS handshake short
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._route.tunnel:
                self._tunnel(sock)
            if self._tls:
                # The handshake after attach(): wrapping takes the descriptor over from
                # `sock`, whose shutdown() would no longer reach it.
                sock = self._tls_context().wrap_socket(
                    sock, server_hostname=self._url.hostname, do_handshake_on_connect=False)
                call.attach(sock)
                sock.do_handshake()
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            # Not retried: the next handshake would meet the same certificate.
            raise ModelError(
                f"the certificate of {self._url.hostname} is not trusted ({exc.verify_message}); "
                "if your own CA signed it, point SSL_CERT_FILE at a bundle of CA certificates "
                "that includes it") from exc
        except (OSError, wire.ProtocolError) as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise TransientModelError(
                    f"no connection within {timeout_s:g} s", unreachable=True) from exc
            raise TransientModelError(reason(exc), unreachable=True) from exc
        line.sock, line.idle_check = sock, select.poll()
        line.idle_check.register(sock, select.POLLIN)
        return sock

    def _tls_context(self) -> ssl.SSLContext:
        # One for every connection: building one loads and parses the whole CA bundle.
        if self._tls_context_made is None:
            self._tls_context_made = ssl.create_default_context()
        return self._tls_context_made

    def _tunnel(self, sock: socket.socket) -> None:
        """Ask the proxy for a tunnel to the server (CONNECT), for TLS end to end."""
        authority = f"{self._url.hostname}:{self._port}"
        wire.send(sock, "CONNECT", authority, host=authority, headers=self._route.proxy_headers)
        status = wire.Response(sock, method="CONNECT").status
        if status != 200:
            raise OSError(f"the proxy refused the tunnel (HTTP {status})")


@dataclass(frozen=True)
class _Route:
    """Where connections go and what requests name: the server and the path, or the
    proxy the environment names and then the absolute URL (http) or, through a tunnel
    the proxy opens (CONNECT), the path (https: TLS end to end)."""

    peer: tuple[str, int]
    target_prefix: str
    tunnel: bool = False
    proxy_headers: dict[str, str] = field(default_factory=dict)
    proxy_scheme: str = "http"


def _route(url: SplitResult, port: int) -> _Route:
    """How to reach `url` given HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY, as
    urllib reads them (lower case first). A proxy is spoken to in plain HTTP: one named
    https:// fails each call with a ModelError that says so."""
    path = url.path.rstrip("/")
    proxies = urllib.request.getproxies()
    proxy_url = proxies.get(url.scheme) or proxies.get("all")
    if not proxy_url or urllib.request.proxy_bypass(url.hostname or ""):
        return _Route((url.hostname or "", port), path)
    proxy = urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
    headers = {}
    if proxy.username or proxy.password:
        credentials = f"{unquote(proxy.username or '')}:{unquote(proxy.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    peer = (proxy.hostname or "", proxy.port or 80)
    if url.scheme == "https":
        return _Route(peer, path, tunnel=True, proxy_headers=headers, proxy_scheme=proxy.scheme)
    return _Route(peer, f"{url.scheme}://{url.netloc.rpartition('@')[2]}{path}",
                  proxy_headers=headers, proxy_scheme=proxy.scheme)


def reason(exc: BaseException) -> str:
    """'[Errno 111] Connection refused' → 'connection refused'."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text).strip() or type(exc).__name__
    return text[0].lower() + text[1:]
