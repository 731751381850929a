"""`/mcp` of the API, forwarded to the MCP server and streamed back (docs/api.md §14).

The MCP server is an ASGI process of its own (`jarvis-agents mcp`, `mcp_server/`); clients
reach it at the API's URL all the same. A request goes on as it came, less its hop-by-hop
headers (its key too: the MCP server checks it and answers its own 401), and the answer
comes back chunk by chunk as the MCP server writes it, so progress notifications and
keep-alives arrive when sent, however long the call. A client that hangs up closes the
forwarded request, which the MCP server takes for a dropped call: it cancels the agent.
The MCP server away is a 503.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from typing import Any
from urllib.parse import urlsplit

import gevent
from flask import Blueprint, Response, request
from gevent.event import AsyncResult
from gevent.queue import Queue
from gevent.socket import wait_read
from werkzeug.exceptions import MethodNotAllowed

from api.auth import public
from api.context import ctx
from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable

log = logging.getLogger(__name__)

bp = Blueprint("mcp", __name__)

# RFC 9110, section 7.6.1: a hop's own headers, never forwarded; Host and Content-Length
# are the forwarded request's own, and gunicorn has answered any `Expect: 100-continue`.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "expect"}
NOT_RETURNED = HOP_BY_HOP | {"date", "server"}  # gunicorn writes its own
VIA = "1.1 jarvis-agents-api"
ADDED = frozenset({"via", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"})  # with this hop
CONNECT_TIMEOUT_S = 5.0
# An idle connection is reused within this, well inside the MCP server's keep-alive (uvicorn's
# 5 s), so that it is not closed under a request (`_quiet` finds one closed before); a few
# are kept for the next requests.
IDLE_S = 2.0
MAX_IDLE = 64
CHUNK_BYTES = 64 * 1024
END = object()  # the end of an answer's body, after its last chunk
# What a connection closed under a request, or one never made, raises.
UNREACHABLE = (OSError, HTTPException)


def forward_url(settings: Settings) -> str:
    """Where `/mcp` goes: JARVIS_MCP_URL, else `jarvis-agents mcp` on this host, as
    `jarvis-agents up` starts it (JARVIS_MCP_PORT, else the API's port + 1)."""
    return settings.mcp_url or f"http://127.0.0.1:{settings.mcp_server_port}/mcp"


class McpUpstream:
    """The MCP server `/mcp` is forwarded to, and the kept-alive connections to it.

    The standard library's client, whose sockets gevent makes cooperative: a forwarded
    request costs it several times less CPU than httpx's (BENCHMARKS.md, "MCP server"),
    in the one worker that serves the whole API.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host = parts.netloc
        self.target = parts.path or "/"
        self.connection_class = HTTPSConnection if parts.scheme == "https" else HTTPConnection
        self.idle: list[tuple[float, HTTPConnection]] = []  # (since when, connection), newest last

    def send(self, method: str, query: str, headers: list[tuple[str, str]],
             body: bytes) -> tuple[HTTPConnection, HTTPResponse]:
        """The request sent and its answer's head read. Never sent twice: a call must not
        run twice because a connection broke under it."""
        target = f"{self.target}?{query}" if query else self.target
        connection = self._connection()
        try:
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in [*headers, ("Host", self.host)]:
                connection.putheader(name, value)
            if body or method in ("POST", "PUT", "PATCH"):
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body or None)  # the head and a small body in one send
            return connection, connection.getresponse()
        except BaseException:
            connection.close()
            raise

    def release(self, connection: HTTPConnection) -> None:
        """A connection whose answer was read to its end, kept for the next request."""
        now = time.monotonic()
        while self.idle and now - self.idle[0][0] >= IDLE_S:
            self.idle.pop(0)[1].close()
        # Closed by the server (it said so); or over TLS, where `_quiet` cannot look.
        if (connection.sock is None or isinstance(connection.sock, ssl.SSLSocket)
                or len(self.idle) >= MAX_IDLE):
            connection.close()
        else:
            self.idle.append((now, connection))

    def close(self) -> None:
        while self.idle:
            self.idle.pop()[1].close()

    def _connection(self) -> HTTPConnection:
        now = time.monotonic()
        while self.idle:
            since, connection = self.idle.pop()
            if now - since < IDLE_S and _quiet(connection.sock):
                return connection
            connection.close()
        connection = self.connection_class(self.host, timeout=CONNECT_TIMEOUT_S)
        connection.connect()
        # No read timeout: a call lasts as long as its agent, the MCP server's keep-alives
        # holding the line meanwhile.
        connection.sock.settimeout(None)
        # http.client writes the head and the body apart: without this, Nagle's algorithm
        # would hold the body until the server's delayed ACK of the head.
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection


@bp.route("/mcp", methods=["GET", "POST", "DELETE"])
@public  # the MCP server checks the key, and answers its own 401
def mcp() -> Response:
    upstream: McpUpstream = ctx().mcp
    if request.method == "HEAD":  # Flask's own, for GET: MCP has none, and its GET never ends
        raise MethodNotAllowed(valid_methods=["GET", "POST", "DELETE"])
    if VIA in request.headers.get("Via", ""):
        raise DependencyUnavailable(
            "JARVIS_MCP_URL points at the API itself; point it at `jarvis-agents mcp`")
    exchange = Exchange(upstream, request.method, request.query_string.decode("latin-1"),
                        _forwarded_headers(), request.get_data(),
                        client_socket=request.environ.get("gunicorn.socket"))
    try:
        answer = exchange.head.get()
    except UNREACHABLE as exc:
        exchange.close()
        log.warning("the MCP server at %s did not answer: %s", upstream.url, exc)
        raise DependencyUnavailable(
            "the MCP server is not answering right now (is `jarvis-agents mcp` running?); "
            "retry shortly") from None
    except ClientGone:
        exchange.close()
        return ForwardedResponse(status=499)  # nobody reads it: the client has hung up
    headers = [(name, value) for name, value in answer.getheaders()
               if name.lower() not in NOT_RETURNED]
    response = ForwardedResponse(exchange.body(), status=answer.status, headers=headers)
    response.call_on_close(exchange.close)  # also when its body is never read (a failed head)
    return response


class ForwardedResponse(Response):
    """The MCP server's answer as it was: no Content-Type where it gave none (a 202)."""

    default_mimetype = None


class ClientGone(Exception):
    """Raised when the client hangs up before the MCP server has answered."""


class Exchange:
    """One request forwarded, in two greenlets besides the request's own.

    `pump` sends the request and puts the answer's chunks in a queue, which the request's
    greenlet writes to the client as they come. `watch` waits for the client's socket to
    read as closed (a hang-up: nothing else is sent on a connection awaiting its answer)
    and kills `pump`, which closes the forwarded request: only a closed connection tells
    the MCP server that a call was dropped, and a WSGI app would otherwise learn of a
    hang-up only at its next write, which a call answered at its end never makes.
    """

    def __init__(self, upstream: McpUpstream, method: str, query: str,
                 headers: list[tuple[str, str]], body: bytes, *, client_socket: Any) -> None:
        self.head: AsyncResult = AsyncResult()
        # Unbounded: an MCP answer is a few small events, and a slow client holds up only itself.
        self.chunks: Queue = Queue()
        self.pump = gevent.spawn(self._pump, upstream, method, query, headers, body)
        self.watch = gevent.spawn(self._watch, client_socket) if _watchable(client_socket) else None

    def body(self) -> Iterator[bytes]:
        try:
            while (chunk := self.chunks.get()) is not END:
                yield chunk
        finally:  # its end, a failed write, or the server closing it
            self.close()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.kill()
        self.pump.kill()  # nothing if it has ended; else the forwarded request is closed

    def _pump(self, upstream: McpUpstream, method: str, query: str,
              headers: list[tuple[str, str]], body: bytes) -> None:
        connection: HTTPConnection | None = None
        try:
            connection, answer = upstream.send(method, query, headers, body)
            self.head.set(answer)
            while chunk := answer.read1(CHUNK_BYTES):
                self.chunks.put(chunk)
            answer.read()  # b"": read1 leaves an answer of a Content-Length open at its end
            upstream.release(connection)
            connection = None
        except UNREACHABLE as exc:
            if not self.head.ready():
                self.head.set_exception(exc)
            else:  # cut in the middle of its answer: the client's stream ends there too
                log.warning("the MCP server's answer was cut: %s", exc)
        finally:
            if connection is not None:
                connection.close()  # unread to its end (killed, or cut): never reused
            if not self.head.ready():
                self.head.set_exception(ClientGone())
            self.chunks.put(END)

    def _watch(self, sock: Any) -> None:
        while True:
            wait_read(sock.fileno())
            try:
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b"":
                    return  # the client sent something (a next request): not a hang-up
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass  # reset: gone too
            log.info("a client hung up on a forwarded MCP request: it is closed")
            self.pump.kill()
            return


def _quiet(sock: socket.socket) -> bool:
    """Whether a kept connection is open with nothing to read: one the server has closed
    reads as its end (and one with bytes nobody asked for is of no use either)."""
    sock.settimeout(0.0)  # gevent's recv would otherwise wait for something to read
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(None)
    return False


def _watchable(sock: Any) -> bool:
    """A plain socket gunicorn handed over (`gunicorn.socket`). Under TLS, or another server,
    a hang-up is found at the next write instead (the MCP server's keep-alives)."""
    return sock is not None and not isinstance(sock, ssl.SSLSocket)


def _forwarded_headers() -> list[tuple[str, str]]:
    """The request's end-to-end headers, with this hop added to Via and X-Forwarded-*."""
    connection_named = {token.strip().lower()
                        for token in request.headers.get("Connection", "").split(",")}
    headers = [(name, value) for name, value in request.headers.items()
               if name.lower() not in NOT_FORWARDED | connection_named | ADDED]
    via = ", ".join(filter(None, [request.headers.get("Via"), VIA]))
    forwarded_for = ", ".join(filter(None, [request.headers.get("X-Forwarded-For"),
                                            request.remote_addr]))
    return headers + [("Via", via), ("X-Forwarded-For", forwarded_for),
                      ("X-Forwarded-Proto", request.scheme), ("X-Forwarded-Host", request.host)]
