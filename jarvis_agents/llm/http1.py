"""A minimal keep-alive HTTP/1.1 client: POST a body, read the reply as it streams in.

Why not httpx for the model call: a worker makes four of them per agent, and
httpx → httpcore → h11 spent about a third of a call's CPU on machinery this call
never needs (per-request Request/Response objects and extension dicts, h11's event
state machine, header normalisation, a pool scan); the head and the body also went
out in two writes. This client does one thing: one request line and pre-rendered
headers, the head and body in one `sendall`, then the status line, the headers and a
body framed by `Transfer-Encoding: chunked`, `Content-Length` or the connection's
end, read off the socket as it arrives. Anything else HTTP offers (redirects,
cookies, proxies, content codings, HTTP/2) it does not do: `OllamaChatModel` uses
httpx when an environment proxy applies to the server.

A connection is used by one thread at a time (`jarvis_agents.llm.connections` lends
them). Another thread may cut it with `socket.shutdown()` (a cancellation): the read
blocked on it returns at once with an error.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_MAX_HEAD = 64 * 1024


class HttpError(Exception):
    """Raised when a request cannot be completed (the base of this module's errors)."""


class ConnectFailed(HttpError):
    """Raised when no connection to the server could be opened (`timed_out`: no answer)."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class ReadTimedOut(HttpError):
    """Raised when the server sent nothing for the read timeout."""


class ConnectionBroke(HttpError):
    """Raised when the connection failed or closed mid-exchange, or the reply was malformed.

    `retry_fresh`: a kept-alive connection ended before any byte of the response, as
    when the server closes an idle connection just as a request goes out; the
    request was not processed and may go again at once on a new connection.
    """

    def __init__(self, reason: str, *, retry_fresh: bool = False) -> None:
        super().__init__(reason)
        self.retry_fresh = retry_fresh


@dataclass(frozen=True)
class Origin:
    """Where requests go: scheme, host, port, and the TLS context for https."""

    host: str
    port: int
    host_header: str
    tls: ssl.SSLContext | None = None


def _ignore(sock: socket.socket) -> None:
    pass


class Connection:
    """One kept-alive connection to an origin, opened on first use and after a close."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.sock: socket.socket | None = None
        self._buffer = bytearray()
        self._reused = False
        self._poller: select.poll | None = None  # not select(): descriptors may pass 1024
        # The current request's limits, and the socket's timeout (None: not known).
        self._read_timeout_s = math.inf
        self._deadline = math.inf
        self._timeout_s: float | None = None

    def close(self) -> None:
        sock, self.sock, self._poller = self.sock, None, None
        self._timeout_s = None
        self._buffer.clear()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def open(self, *, connect_timeout_s: float,
             attach: Callable[[socket.socket], None] = _ignore) -> socket.socket:
        """The socket requests go out on: the kept one if the server has not closed it.

        `attach` is given the socket before any wait on it: a new one before it
        connects, and the TLS socket before its handshake, so that another thread
        can cut the wait short with `shutdown()`. It may raise to give up.
        """
        if self.sock is not None:
            # Readable while idle means the server closed it (or sent something
            # unasked): a new connection, rather than a request that fails.
            if not (self._poller and self._poller.poll(0)):
                self._reused = True
                attach(self.sock)
                return self.sock
            self.close()
        self._reused = False
        origin = self.origin
        try:
            sock = _connect(origin, connect_timeout_s, attach)
        except TimeoutError as exc:
            raise ConnectFailed(f"no connection within {connect_timeout_s:g} s",
                                timed_out=True) from exc
        except OSError as exc:
            raise ConnectFailed(_reason(exc)) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if origin.tls is not None:
                # The handshake after attach(): wrapping takes the descriptor over
                # from `sock`, whose shutdown() would no longer reach it.
                sock = origin.tls.wrap_socket(sock, server_hostname=origin.host,
                                              do_handshake_on_connect=False)
                attach(sock)
                sock.do_handshake()
        except TimeoutError as exc:
            sock.close()
            raise ConnectFailed(f"no TLS handshake within {connect_timeout_s:g} s",
                                timed_out=True) from exc
        except OSError as exc:
            sock.close()
            raise ConnectFailed(_reason(exc)) from exc
        except BaseException:  # attach() gave up
            sock.close()
            raise
        self.sock = sock
        self._timeout_s = None
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return sock

    def request(self, head: bytes, body: bytes, *, read_timeout_s: float,
                deadline: float = math.inf) -> Response:
        """Send a request on the open socket and read the response's head.

        Each wait for the server (this send, and each read of the response) ends
        after `read_timeout_s` or at `deadline` (a `time.monotonic()` value), whichever
        comes first, with ReadTimedOut. A kept-alive connection that ends before any
        byte of the response raises ConnectionBroke with `retry_fresh` set.
        """
        sock = self.sock
        assert sock is not None, "open() first"
        self._read_timeout_s = read_timeout_s
        self._deadline = deadline
        self._arm(sock)
        try:
            sock.sendall(head + body)
        except TimeoutError as exc:
            raise ReadTimedOut("the request could not be sent") from exc
        except OSError as exc:
            raise _broke(exc, fresh=self._reused) from exc
        status, headers, version = self._head(first=True)
        while 100 <= status < 200 and status != 101:  # interim answers (100 Continue)
            status, headers, version = self._head(first=False)
        return Response(self, status, headers, version)

    # --- reading ---------------------------------------------------------------------

    def _head(self, *, first: bool) -> tuple[int, dict[str, str], bytes]:
        buffer = self._buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if len(buffer) > _MAX_HEAD:
                raise ConnectionBroke("the response head is too large")
            self._fill(fresh=first and not buffer)
        lines = bytes(buffer[:end]).split(b"\r\n")
        del buffer[: end + 4]
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ConnectionBroke(f"not an HTTP/1 response: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return int(parts[1]), headers, parts[0]

    def _fill(self, *, fresh: bool = False) -> None:
        """Read what the socket has into the buffer (at least one byte, or raise)."""
        sock = self.sock
        if sock is None:
            raise ConnectionBroke("the connection was closed")
        self._arm(sock)
        try:
            data = sock.recv(65536)
        except TimeoutError as exc:
            raise ReadTimedOut("no data for the read timeout") from exc
        except OSError as exc:
            raise _broke(exc, fresh=fresh and self._reused) from exc
        if not data:
            raise ConnectionBroke("the server closed the connection",
                                  retry_fresh=fresh and self._reused)
        self._buffer += data

    def _arm(self, sock: socket.socket) -> None:
        """Set the timeout of the next wait: the read timeout, cut short by the deadline.

        Per wait rather than once per request: a reply that trickles in must not
        let each read wait the whole time that was left when the request went out.
        """
        timeout_s = self._read_timeout_s
        left_s = self._deadline - time.monotonic()
        if left_s < timeout_s:
            if left_s <= 0:
                raise ReadTimedOut("the deadline passed")
            timeout_s = left_s
        if timeout_s != self._timeout_s:
            sock.settimeout(timeout_s)
            self._timeout_s = timeout_s

    def _line(self) -> bytes:
        buffer = self._buffer
        while (end := buffer.find(b"\r\n")) < 0:
            if len(buffer) > _MAX_HEAD:
                raise ConnectionBroke("a chunk header is too large")
            self._fill()
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line

    def _exactly(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            self._fill()
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _some(self, limit: int) -> bytes:
        """Up to `limit` bytes: what is buffered, else what the next read brings."""
        if not self._buffer:
            self._fill()
        data = bytes(self._buffer[:limit])
        del self._buffer[:limit]
        return data


class Response:
    """A response whose head has been read; its body is read with `iter_body` or `read`."""

    def __init__(self, connection: Connection, status: int, headers: dict[str, str],
                 version: bytes) -> None:
        self.status = status
        self.headers = headers
        self._connection = connection
        self.complete = False  # the body was read to its end
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        self.keep_alive = "close" not in tokens and (version != b"HTTP/1.0" or "keep-alive" in tokens)
        coding = headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            raise ConnectionBroke(f"the response is {coding}-encoded; identity was asked for")

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry the next request."""
        return self.complete and self.keep_alive

    def iter_body(self) -> Iterator[bytes]:
        """The body's bytes as they arrive (a chunk, or what one read brings)."""
        connection = self._connection
        if self.status in (204, 304):
            self.complete = True
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            yield from self._chunked()
            return
        length = self.headers.get("content-length")
        if length is not None:
            try:
                left = int(length)
            except ValueError:
                raise ConnectionBroke(f"malformed Content-Length: {length!r}") from None
            while left > 0:
                data = connection._some(left)
                left -= len(data)
                yield data
            self.complete = True
            return
        self.keep_alive = False  # the body ends with the connection
        while True:
            try:
                data = connection._some(65536)
            except ConnectionBroke:
                self.complete = True
                return
            yield data

    def read(self) -> bytes:
        return b"".join(self.iter_body())

    def _chunked(self) -> Iterator[bytes]:
        """A chunked body: each time, every whole chunk the reads so far brought, joined.

        A model streams a line per token, each its own chunk, and several arrive in one
        read: decoding them in one pass and handing them on together costs a fraction
        of a pass and a yield per chunk.
        """
        connection = self._connection
        buffer = connection._buffer
        while True:
            parts: list[bytes] = []
            at = 0
            size = -1
            while (end := buffer.find(b"\r\n", at)) >= 0:
                line = bytes(buffer[at:end])
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ConnectionBroke(f"malformed chunk size: {line[:40]!r}") from None
                if size == 0:
                    break
                start = end + 2
                if len(buffer) < start + size + 2:
                    break
                if buffer[start + size:start + size + 2] != b"\r\n":
                    raise ConnectionBroke("a chunk did not end with CRLF")
                parts.append(bytes(buffer[start:start + size]))
                at = start + size + 2
                size = -1
            del buffer[:at]
            if parts:
                yield b"".join(parts)
            if size == 0:
                connection._line()  # the last chunk's "0"
                while connection._line():  # trailers, up to the empty line
                    pass
                self.complete = True
                return
            if not parts:
                if len(buffer) > _MAX_HEAD and buffer.find(b"\r\n") < 0:
                    raise ConnectionBroke("a chunk header is too large")
                connection._fill()


def _connect(origin: Origin, timeout_s: float,
             attach: Callable[[socket.socket], None]) -> socket.socket:
    """socket.create_connection(), but each socket is attached before it connects."""
    first: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(
            origin.host, origin.port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            attach(sock)
            sock.settimeout(timeout_s)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            first = first or exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    if first is None:
        raise OSError("getaddrinfo returned no address")
    try:
        raise first  # as create_connection: the first address's failure
    finally:
        first = None  # no reference cycle through this frame


def _broke(exc: OSError, *, fresh: bool) -> ConnectionBroke:
    return ConnectionBroke(_reason(exc), retry_fresh=fresh)


def _reason(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = text.strip() or type(exc).__name__
    return text[0].lower() + text[1:]
