"""One HTTP/1.1 exchange on a connected socket: the request in one write, the response
read off the socket as it arrives.

Why our own rather than a library's: this is the part of an HTTP client a model call
spends its CPU in. A model streams its reply a token per chunk: httpx (h11) handles
each chunk as an event of its own and http.client reads each in three steps, while
here the whole chunks one read brought are cut out in one pass and handed on together;
the head and body also go out in one write (the others write twice). A worker makes
several model calls per agent, hundreds at once, so what a client spends per call shows
in its agents/s: `python -m bench.model_client` compares the three, and BENCHMARKS.md
(notes, "Figures moved out of the code's comments") has what it found.

What it leaves out, as a model server's reply needs none of it: redirects, cookies,
content codings (it asks for identity and refuses others), trailers (read and
dropped), HTTP/2. Connections, TLS and proxies are `jarvis_agents.llm.streaming`'s.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping

_MAX_HEAD = 64 * 1024


class ProtocolError(Exception):
    """Raised when the server closed the connection mid-response or did not speak HTTP/1."""


def send(sock: socket.socket, method: str, target: str, *, host: str,
         headers: Mapping[str, str], body: bytes | None = None) -> None:
    """Write a request, head and body together: one packet where they fit in one."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    sock.sendall("\r\n".join([*lines, "", ""]).encode("latin-1") + (body or b""))


class Response:
    """A response whose head has been read; its body is read with `chunks()` or `read()`."""

    def __init__(self, sock: socket.socket, *, method: str = "POST") -> None:
        self._sock = sock
        self._buffer = bytearray()
        self.complete = False  # the body was read to its end
        self.status, self.headers, version = self._head()
        while 100 <= self.status < 200 and self.status != 101:  # interim (100 Continue)
            self.status, self.headers, version = self._head()
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        self.keep_alive = "close" not in tokens and (version != b"HTTP/1.0" or "keep-alive" in tokens)
        self._bodiless = method in ("HEAD", "CONNECT") or self.status in (204, 304)
        coding = self.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            raise ProtocolError(f"the response is {coding}-encoded; identity was asked for")

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry the next request."""
        return self.complete and self.keep_alive and not self._buffer

    def set_timeout(self, seconds: float) -> None:
        """How long each read of the rest of the body may wait."""
        self._sock.settimeout(seconds)

    def read(self) -> bytes:
        """The rest of the body."""
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives: each time, what one read off the socket brought."""
        if self._bodiless:
            self.complete = True
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            yield from self._chunked()
        elif (length := self.headers.get("content-length")) is not None:
            if not length.strip().isdigit():
                raise ProtocolError(f"malformed Content-Length: {length!r}")
            left = int(length)
            while left > 0:
                if not self._buffer:
                    self._fill()
                data = bytes(self._buffer[:left])
                del self._buffer[:left]
                left -= len(data)
                yield data
        else:  # the body ends with the connection
            self.keep_alive = False
            if self._buffer:
                yield bytes(self._buffer)
                self._buffer.clear()
            while data := self._sock.recv(65536):
                yield data
        self.complete = True

    # --- reading -----------------------------------------------------------------------

    def _fill(self) -> None:
        """Read what the socket has into the buffer (at least one byte, or raise)."""
        data = self._sock.recv(65536)
        if not data:
            raise ProtocolError("the server closed the connection mid-response")
        self._buffer += data

    def _line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > _MAX_HEAD:
                raise ProtocolError("a line of the response is too long")
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _head(self) -> tuple[int, dict[str, str], bytes]:
        buffer = self._buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if len(buffer) > _MAX_HEAD:
                raise ProtocolError("the response head is too large")
            self._fill()
        lines = bytes(buffer[:end]).split(b"\r\n")
        del buffer[: end + 4]
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1 response: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key, text = name.strip().lower().decode("latin-1"), value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return int(parts[1]), headers, parts[0]

    def _chunked(self) -> Iterator[bytes]:
        """A chunked body: each time, every whole chunk the reads so far brought, joined."""
        buffer = self._buffer
        while True:
            parts: list[bytes] = []
            at, size = 0, -1
            while (end := buffer.find(b"\r\n", at)) >= 0:
                line = bytes(buffer[at:end])
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise ProtocolError(f"malformed chunk size: {line[:40]!r}") from None
                start = end + 2
                if size == 0 or len(buffer) < start + size + 2:
                    break
                if buffer[start + size:start + size + 2] != b"\r\n":
                    raise ProtocolError("a chunk did not end with CRLF")
                parts.append(bytes(buffer[start:start + size]))
                at, size = start + size + 2, -1
            del buffer[:at]
            if parts:
                yield b"".join(parts)
            if size == 0:
                self._line()  # the last chunk's "0"
                while self._line():  # trailers, up to the empty line
                    pass
                return
            if not parts:
                if len(buffer) > _MAX_HEAD and buffer.find(b"\r\n") < 0:
                    raise ProtocolError("a chunk header is too large")
                self._fill()
