"""`/mcp` of the API: requests forwarded to the MCP server, answers streamed back (README, MCP server).

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
from collections.abc import Iterator
from typing import Any

import gevent
import httpx
from flask import Blueprint, Response, request
from gevent.event import AsyncResult
from gevent.queue import Queue
from gevent.socket import wait_read

from api.auth import public
from api.context import ctx
from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable

log = logging.getLogger(__name__)

bp = Blueprint("mcp", __name__)

# RFC 9110, section 7.6.1: a hop's own headers, never forwarded; Host and Content-Length
# are the forwarded request's own (httpx writes them).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
NOT_RETURNED = HOP_BY_HOP | {"date", "server"}  # gunicorn writes its own
VIA = "1.1 jarvis-agents-api"
CONNECT_TIMEOUT_S = 5.0
END = object()  # the end of an answer's body, after its last chunk


def forward_url(settings: Settings) -> str:
    """Where `/mcp` goes: JARVIS_MCP_URL, else `jarvis-agents mcp` on this host, as
    `jarvis-agents up` starts it (JARVIS_MCP_PORT, else the API's port + 1)."""
    return settings.mcp_url or f"http://127.0.0.1:{settings.mcp_server_port}/mcp"


class McpUpstream:
    """The MCP server `/mcp` is forwarded to, and the one HTTP client the API reaches it with."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(
            # No read timeout: a call lasts as long as its agent (the MCP server's keep-alives
            # hold the line meanwhile). A server that does not accept within seconds is away.
            timeout=httpx.Timeout(30.0, connect=CONNECT_TIMEOUT_S, read=None, pool=None),
            # As many calls in flight as clients make: the MCP server is the one to refuse.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
            # An internal hop: never through an HTTP(S)_PROXY of the environment.
            trust_env=False,
        )

    def close(self) -> None:
        self.http.close()


@bp.route("/mcp", methods=["GET", "POST", "DELETE"])
@public  # the MCP server checks the key, and answers its own 401
def mcp() -> Response:
    upstream: McpUpstream = ctx().mcp
    if VIA in request.headers.get("Via", ""):
        raise DependencyUnavailable(
            "JARVIS_MCP_URL points at the API itself; point it at `jarvis-agents mcp`")
    forwarded = upstream.http.build_request(
        request.method, upstream.url, params=request.query_string.decode("latin-1") or None,
        headers=_forwarded_headers(), content=request.get_data() or None)
    exchange = Exchange(upstream.http, forwarded, client_socket=request.environ.get("gunicorn.socket"))
    try:
        answer = exchange.head.get()
    except httpx.TransportError as exc:
        exchange.close()
        log.warning("the MCP server at %s did not answer: %s", upstream.url, exc)
        raise DependencyUnavailable(
            "the MCP server is not answering right now (is `jarvis-agents mcp` running?); "
            "retry shortly") from None
    except ClientGone:
        exchange.close()
        return ForwardedResponse(status=499)  # nobody reads it: the client has hung up
    headers = [(name, value) for name, value in answer.headers.multi_items()
               if name.lower() not in NOT_RETURNED]
    return ForwardedResponse(exchange.body(), status=answer.status_code, headers=headers)


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

    def __init__(self, http: httpx.Client, forwarded: httpx.Request, *, client_socket: Any) -> None:
        self.head: AsyncResult = AsyncResult()
        # Unbounded: an MCP answer is a few small events, and a slow client holds up only itself.
        self.chunks: Queue = Queue()
        self.pump = gevent.spawn(self._pump, http, forwarded)
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

    def _pump(self, http: httpx.Client, forwarded: httpx.Request) -> None:
        answer: httpx.Response | None = None
        try:
            answer = http.send(forwarded, stream=True)
            self.head.set(answer)
            for chunk in answer.iter_raw():
                self.chunks.put(chunk)
        except httpx.TransportError as exc:
            if not self.head.ready():
                self.head.set_exception(exc)
            else:  # cut in the middle of its answer: the client's stream ends there too
                log.warning("the MCP server's answer was cut: %s", exc)
        finally:
            if answer is not None:
                answer.close()  # unread to its end, the connection is closed, not reused
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


def _watchable(sock: Any) -> bool:
    """A plain socket gunicorn handed over (`gunicorn.socket`). Under TLS, or another server,
    a hang-up is found at the next write instead (the MCP server's keep-alives)."""
    return sock is not None and not isinstance(sock, ssl.SSLSocket)


def _forwarded_headers() -> list[tuple[str, str]]:
    connection_named = {token.strip().lower()
                        for token in request.headers.get("Connection", "").split(",")}
    headers = [(name, value) for name, value in request.headers.items()
               if name.lower() not in NOT_FORWARDED and name.lower() not in connection_named]
    headers += [("Via", VIA), ("X-Forwarded-For", request.remote_addr or ""),
                ("X-Forwarded-Proto", request.scheme), ("X-Forwarded-Host", request.host)]
    return headers
