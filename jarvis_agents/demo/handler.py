"""The model server's HTTP side (the standard library's http.server): a thread per
connection, each chat reply sent as its protocol says (`ollama_api`, `openai_api`), paced
and cut as its `ModelServer` says, and a client that hangs up noticed."""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from jarvis_agents.demo.ollama_api import OllamaChat, model_entry, show
from jarvis_agents.demo.openai_api import OpenAIChat, models
from jarvis_agents.demo.replies import ScriptExhausted, as_turn, cut_at_stop

if TYPE_CHECKING:
    from jarvis_agents.demo.server import ModelServer

Protocol = type[OllamaChat] | type[OpenAIChat]
CHAT_ENDPOINTS: dict[str, Protocol] = {"/api/chat": OllamaChat, "/v1/chat/completions": OpenAIChat}


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # restart on the same port despite TIME_WAIT sockets
    # socketserver's default backlog is 5: a burst of 200 agents calling at once would
    # wait a second for SYN retries. Ollama (Go's net/http) listens with the kernel's.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], model: ModelServer) -> None:
        self.model = model
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
        if self.model.tls is not None:
            # The handshake on the handler's thread, at its first read: one client that
            # never finishes it holds up no other.
            sock = self.model.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        with self._connections_lock:
            self._connections.add(sock)
        self.model.count(connection=True)
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
        # A client that hung up, or stop() cutting a reply, is expected here; so is one
        # that refused the certificate (ssl.SSLError is an OSError).
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: http.server leaves Nagle on, which adds ~40 ms to small responses.
    disable_nagle_algorithm = True
    server: HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        model = self.server.model
        model.heard(self.headers.get("Authorization"))
        if path == "/api/tags":
            model.count(listing=path)
            self._send_json(200, {"models": [model_entry(m) for m in model.models]})
        elif path == "/v1/models":
            model.count(listing=path)
            self._send_json(200, models(model.models))
        elif path == "/api/version":
            self._send_json(200, {"version": "0.6.0-jarvis-demo"})
        elif path == "/":
            self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
        else:
            self._send_json(404, {"error": "404 page not found"})

    def do_POST(self) -> None:
        self.server.model.heard(self.headers.get("Authorization"))
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._send_json(400, {"error": f"invalid JSON: {exc}"})
            return
        path = urlsplit(self.path).path
        if path in CHAT_ENDPOINTS:
            self._chat(body, path, CHAT_ENDPOINTS[path])
        elif path == "/api/show":
            name = body.get("model") or body.get("name") or ""
            capabilities = self.server.model.capabilities_of(name)
            if not self.server.model.knows(name):
                self._send_json(404, {"error": f'model "{name}" not found, try pulling it first'})
                return
            self._send_json(200, show(name, capabilities))
        else:
            self._send_json(404, {"error": "404 page not found"})

    def _chat(self, request: dict[str, Any], path: str, protocol: Protocol) -> None:
        server = self.server.model
        failure, drop_after = server.admit(request, path)
        if failure is not None:
            self._send_json(failure[0], protocol.error(failure[1], failure[0]))
            return
        model = str(request.get("model", ""))
        if not server.knows(model):
            self._send_json(404, protocol.not_found(model))
            return
        try:
            turn = as_turn(server.responder(request))
        except ScriptExhausted as exc:
            self._send_json(400, protocol.error(str(exc), 400))
            return
        except Exception as exc:  # noqa: BLE001 - a broken responder is a 500, like a crashed runner
            self._send_json(500, protocol.error(f"responder failed: {exc!r}", 500))
            return
        turn = replace(turn, text=cut_at_stop(turn.text, protocol.stops(request)))
        if self._pause(server.latency()):  # model load + prompt evaluation
            return
        if not protocol.streamed(request):
            self._send_json(200, protocol.whole(request, turn, model))
            return
        self._stream(protocol.content_type, protocol.chunks(request, turn, model), drop_after)

    def _stream(self, content_type: str, chunks: list[bytes], drop_after: int | None) -> None:
        """Send `chunks` as a chunked body, one piece at a time, as a model writes them."""
        model = self.server.model
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for index, chunk in enumerate(chunks):
                if drop_after is not None and index >= drop_after:
                    self.close_connection = True  # no terminating chunk: the client sees a cut
                    return
                if index and model.chunk_delay_s and self._pause(model.chunk_delay_s):
                    return
                self._write_chunk(chunk)
                model.count(chunk=True)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            model.count(hangup=True)

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
                        self.server.model.count(hangup=True)
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
