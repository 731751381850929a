"""A bare HTTP/1.1 server that lets a test write the bytes of each response itself.

For what a well-behaved server never sends (NDJSON lines run together, an error line
mid-stream) and for playing a forward proxy: it records each request as it arrived,
request line and all, and counts its connections.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Answer = Callable[[socket.socket, bytes], bool]  # (connection, request body) → keep it open?


class RawServer:
    """Reads one request at a time per connection and lets `answer` write the response."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(next(
                    (line.split(b":")[1] for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")), b"0"))
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                self.requests.append(head + b"\r\n\r\n" + body)
                if not self.answer(conn, body):
                    return

    def close(self) -> None:
        self.listener.close()


@contextmanager
def raw_server(answer: Answer) -> Iterator[RawServer]:
    server = RawServer(answer)
    try:
        yield server
    finally:
        server.close()


def ndjson_reply(*lines: bytes) -> Answer:
    """A streamed 200 whose NDJSON lines all go out in one chunk, so one read brings them."""
    def answer(conn: socket.socket, body: bytes) -> bool:
        data = b"".join(lines)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        return True

    return answer
