"""A webhook receiver for tests: a real HTTP server that records every request and answers
as scripted — a status code; "hang" (holds the request, answering nothing, until the
test lets go or the receiver closes); "endless" (a 200 that announces 100 MiB of
body, sends 64 KiB of it, then holds the rest back the same way); or "trickle" (a 200
whose head comes one byte every `trickle_s`, so that no single read ever waits long).

    with WebhookReceiver(script=[500]) as receiver:   # the first try fails, then 200s
        ...
        (first, second) = receiver.wait_for(2, timeout_s=30)

It counts accepted connections too, so a test can tell that nothing ever reached it.
With `tls` (a server-side ssl.SSLContext) it speaks HTTPS.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

HANG = "hang"
ENDLESS = "endless"
TRICKLE = "trickle"
TRICKLED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    at: float  # time.monotonic() when the request's body was read
    answered: int | str  # the status sent, or HANG or ENDLESS

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class WebhookReceiver:
    def __init__(self, *, script: Iterable[int | str] = (), tls: ssl.SSLContext | None = None,
                 host: str = "127.0.0.1", trickle_s: float = 1.0) -> None:
        self.script = list(script)  # answers for the first requests, in order; then 200
        self.trickle_s = trickle_s
        self.requests: list[Received] = []
        self.connections = 0
        self.release = threading.Event()  # lets every hanging request go (with a 200)
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._changed:
                    answer = receiver.script.pop(0) if receiver.script else 200
                    receiver.requests.append(Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                        time.monotonic(), answer))
                    receiver._changed.notify_all()
                if answer == HANG:
                    receiver.release.wait()
                    answer = 200
                if answer == TRICKLE:
                    self.close_connection = True
                    for byte in TRICKLED_HEAD:
                        if receiver.release.wait(receiver.trickle_s):
                            return
                        try:
                            self.wfile.write(bytes([byte]))
                        except OSError:  # the sender gave up
                            return
                    return
                if answer == ENDLESS:
                    self.send_response(200)
                    self.send_header("Content-Length", str(100 * 2**20))
                    self.end_headers()
                    self.wfile.write(b"x" * 65536)
                    self.wfile.flush()
                    receiver.release.wait()
                    self.close_connection = True
                    return
                self.send_response(int(answer))
                self.send_header("Content-Type", "text/plain")
                payload = b"ok" if int(answer) < 400 else b"receiver says no"
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                sock, address = super().get_request()
                with receiver._changed:
                    receiver.connections += 1
                if tls is not None:
                    sock = tls.wrap_socket(sock, server_side=True)
                return sock, address

        self.tls = tls
        self.server = Server((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    def wait_for(self, count: int, timeout_s: float) -> list[Received]:
        """The first `count` requests, once they have arrived; AssertionError after the deadline."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{len(self.requests)} of {count} webhook requests within {timeout_s} s")
                self._changed.wait(left)
            return list(self.requests[:count])

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
