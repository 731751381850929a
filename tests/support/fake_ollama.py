"""A real HTTP server that speaks Ollama's protocol, for integration tests and benchmarks.

It answers `POST /api/chat` (streamed NDJSON or a single JSON), `GET /api/tags`,
`GET /api/version` and `POST /api/show` like Ollama does, including the 404 for a
model that is not pulled and the handling of `options.stop`. A test scripts it with a
`responder(request_json) -> reply` and can add latency, slow chunks, HTTP failures
and dropped connections; it can be stopped and restarted on the same port to
simulate an outage. Like Ollama, it notices a client that hangs up mid-reply (even
while it is silent, before the first token) and stops replying: `hangups` counts
them, and `connections` the connections it accepted. Run it as a process for benchmarks:

    python -m tests.support.fake_ollama --port 11555 --latency 2.0 --script calc
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

Responder = Callable[[dict[str, Any]], str]
Latency = float | Callable[[], float]

DEFAULT_MODELS = ("llama3.2", "test-model")


class ScriptExhausted(Exception):
    """Raised by a by_turn responder asked for a turn its script does not have (HTTP 400)."""


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _model_entry(name: str) -> dict[str, Any]:
    return {
        "name": _with_tag(name), "model": _with_tag(name), "modified_at": _now(),
        "size": 2_019_393_189, "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
    }


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(cuts)] if cuts else text


def _default_responder(request: dict[str, Any]) -> str:
    return "THOUGHT: Nothing to look up.\nFINAL_ANSWER: 42"


class FakeOllama:
    """An Ollama look-alike on a real socket; a context manager that starts and stops it."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        responder: Responder | None = None,
        models: Iterable[str] = DEFAULT_MODELS,
        latency_s: Latency = 0.0,
        chunk_delay_s: float = 0.0,
    ) -> None:
        self.host = host
        self.port = port  # 0 picks a free port at the first start(); restarts reuse it
        self.responder: Responder = responder or _default_responder
        self.models = list(models)
        self.latency_s = latency_s
        self.chunk_delay_s = chunk_delay_s
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._failures: deque[tuple[int, str]] = deque()
        self._drops: deque[int] = deque()
        self._hangups = 0
        self._connections = 0
        self._changed = threading.Condition(self._lock)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> FakeOllama:
        if self._server is not None:
            raise RuntimeError(f"FakeOllama is already running at {self.url}")
        server = _Server((self.host, self.port), self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown() waits up to one poll interval
            name=f"fake-ollama-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection, as a crashed server would."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.stop()  # wakes handlers waiting out a latency or chunk delay
        server.shutdown()
        server.server_close()
        server.cut_connections()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- scripting -------------------------------------------------------------------

    @staticmethod
    def by_turn(replies: Sequence[str]) -> Responder:
        """Reply index = number of assistant messages in the request's conversation.

        The conversation says which turn it is, so one script serves 100 concurrent
        agents and agents resumed from their persisted steps alike.
        """
        script = list(replies)

        def respond(request: dict[str, Any]) -> str:
            turn = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
            if turn >= len(script):
                raise ScriptExhausted(
                    f"FakeOllama script has {len(script)} replies; the conversation is at turn {turn + 1}"
                )
            return script[turn]

        return respond

    def fail_next(self, n: int = 1, *, status: int = 500, message: str = "internal server error") -> None:
        """Answer the next `n` chat requests with HTTP `status` and `{"error": message}`."""
        with self._lock:
            self._failures.extend([(status, message)] * n)

    def drop_next(self, n: int = 1, *, after_chunks: int = 1) -> None:
        """Cut the connection of the next `n` streamed replies after `after_chunks` chunks."""
        with self._lock:
            self._drops.extend([after_chunks] * n)

    # --- what was received -----------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def call_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def connections(self) -> int:
        """How many connections it has accepted (each a TCP handshake)."""
        with self._lock:
            return self._connections

    @property
    def hangups(self) -> int:
        """How many chat replies ended because the client hung up before their end."""
        with self._lock:
            return self._hangups

    def wait_for_hangups(self, n: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Whether `n` clients have hung up mid-reply, waiting up to `timeout_s` for it."""
        with self._changed:
            return self._changed.wait_for(lambda: self._hangups >= n, timeout=timeout_s)

    def knows(self, model: str) -> bool:
        return _with_tag(model) in {_with_tag(m) for m in self.models}

    def _admit(self, request: dict[str, Any]) -> tuple[tuple[int, str] | None, int | None]:
        """Record a chat request; return the failure and the drop scheduled for it."""
        with self._lock:
            self._requests.append(request)
            failure = self._failures.popleft() if self._failures else None
            drop = self._drops.popleft() if self._drops and failure is None else None
            return failure, drop

    def _latency(self) -> float:
        return self.latency_s() if callable(self.latency_s) else self.latency_s

    def _count(self, *, connection: bool = False, hangup: bool = False) -> None:
        with self._changed:
            self._connections += connection
            self._hangups += hangup
            self._changed.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # restart on the same port despite TIME_WAIT sockets
    # socketserver's default backlog is 5: a burst of 200 agents calling at once would
    # wait a second for SYN retries. Ollama (Go's net/http) listens with the kernel's.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], fake: FakeOllama) -> None:
        self.fake = fake
        self.stopping = threading.Event()
        # Readable once the server stops: wakes the handlers waiting out a pause.
        self.stopped_fd, self._stop_fd = os.pipe()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def stop(self) -> None:
        self.stopping.set()
        os.write(self._stop_fd, b"x")

    def server_close(self) -> None:
        super().server_close()
        # After stop(): a handler that polls a closed (or reused) descriptor wakes, sees
        # `stopping` set, and ends.
        os.close(self._stop_fd)
        os.close(self.stopped_fd)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self._connections_lock:
            self._connections.add(sock)
        self.fake._count(connection=True)
        return sock, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        # Keep-alive connections would otherwise go on being served after stop().
        with self._connections_lock:
            connections = list(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up, or stop() cutting a reply, is expected here.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: http.server leaves Nagle on, which adds ~40 ms to small responses.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/api/tags":
            models = [_model_entry(m) for m in self.server.fake.models]
            self._send_json(200, {"models": models})
        elif path == "/api/version":
            self._send_json(200, {"version": "0.6.0-fake"})
        elif path == "/":
            self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
        else:
            self._send_json(404, {"error": "404 page not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._send_json(400, {"error": f"invalid JSON: {exc}"})
            return
        path = urlsplit(self.path).path
        if path == "/api/chat":
            self._chat(body)
        elif path == "/api/show":
            name = body.get("model") or body.get("name") or ""
            if not self.server.fake.knows(name):
                self._send_json(404, {"error": f'model "{name}" not found, try pulling it first'})
                return
            details = {"format": "gguf", "family": "llama"}
            self._send_json(200, {
                "modelfile": f"FROM {name}", "parameters": "", "template": "{{ .Prompt }}",
                "details": details, "model_info": {}, "capabilities": ["completion", "tools"],
            })
        else:
            self._send_json(404, {"error": "404 page not found"})

    def _chat(self, request: dict[str, Any]) -> None:
        fake = self.server.fake
        failure, drop_after = fake._admit(request)
        if failure is not None:
            self._send_json(failure[0], {"error": failure[1]})
            return
        model = str(request.get("model", ""))
        if not fake.knows(model):
            self._send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        try:
            reply = fake.responder(request)
        except ScriptExhausted as exc:
            self._send_json(400, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - a broken responder is a 500, like a crashed runner
            self._send_json(500, {"error": f"responder failed: {exc!r}"})
            return
        reply = _cut_at_stop(reply, (request.get("options") or {}).get("stop") or [])
        started = time.monotonic()
        if self._pause(fake._latency()):  # model load + prompt evaluation
            return
        base = {"model": model, "created_at": _now()}
        done = {
            **base, "message": {"role": "assistant", "content": ""}, "done": True,
            "done_reason": "stop", "total_duration": int((time.monotonic() - started) * 1e9),
            "load_duration": 0, "prompt_eval_count": len(request.get("messages", [])),
            "eval_count": len(reply.split()),
        }
        if request.get("stream", True) is False:
            self._send_json(200, {**done, "message": {"role": "assistant", "content": reply}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        # Token-like pieces: a word with its leading whitespace, as Ollama streams them.
        try:
            for index, piece in enumerate(re.findall(r"\s*\S+|\s+", reply)):
                if drop_after is not None and index >= drop_after:
                    self.close_connection = True  # no terminating chunk: the client sees a cut
                    return
                if index and fake.chunk_delay_s and self._pause(fake.chunk_delay_s):
                    return
                line = {**base, "message": {"role": "assistant", "content": piece}, "done": False}
                self._write_chunk(json.dumps(line).encode() + b"\n")
            self._write_chunk(json.dumps(done).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            fake._count(hangup=True)

    def _pause(self, seconds: float) -> bool:
        """Wait `seconds` as a model would; True when the reply must end instead.

        It must when the server is stopping, or when the client hung up, which is
        counted: Ollama notices a client that went away and stops generating.
        """
        if seconds <= 0:
            stopping = self.server.stopping.is_set()
        else:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            poller.register(self.server.stopped_fd, select.POLLIN)
            end = time.monotonic() + seconds
            while (left := end - time.monotonic()) > 0 and not self.server.stopping.is_set():
                if poller.poll(left * 1000) and not self.server.stopping.is_set():
                    try:
                        gone = not self.connection.recv(1, socket.MSG_PEEK)
                    except OSError:
                        gone = True
                    if gone:
                        self.close_connection = True
                        self.server.fake._count(hangup=True)
                        return True
                    poller.unregister(self.connection)  # a request sent early: not a hang-up
            stopping = self.server.stopping.is_set()
        if stopping:
            self.close_connection = True
        return stopping

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json; charset=utf-8")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    # The command line, with its built-in scripts, lives beside this module.
    from tests.support.fake_ollama_scripts import main

    sys.exit(main())
