"""The SSE wire format (docs/api.md §4), and live steps written without waking their stream.

What to tell comes from `jarvis_agents.events` (`follow`'s StepEvent and Ended); this
module only frames it. A hot agent watched by a thousand streams used to cost, per
event, a thousand `json.dumps` of the same event and a thousand greenlets woken,
each going through its generator, Werkzeug and gunicorn's chunked writer to the same
`send()`, one stream after another, so the last stream got it long after the first. Now
`step_frame` encodes a published step once, and `SocketWriter` lets the hub's reader
put it straight on each waiting stream's socket: one `send()` per stream.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from dataclasses import dataclass
from typing import Any

from flask import Response

from jarvis_agents.events import Ended, Message, StepEvent

KEEPALIVE = b": keepalive\n\n"


def sse(event: str, data: dict[str, Any], *, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@dataclass(frozen=True)
class StepFrame:
    """A published step as every stream sends it."""

    message: Message
    seq: int
    frame: bytes  # the SSE event
    chunk: bytes  # the same as one HTTP/1.1 chunk, byte for byte as gunicorn frames it


_last: StepFrame | None = None


def step_frame(message: Message) -> StepFrame | None:
    """The frame of a published step; None if it has no usable `seq`.

    One cached frame is enough: the hub hands the same Message object to every
    subscription of its channel one after another, so every stream but the first
    finds it here. (Keyed by identity: a Message holds a dict and has no hash.)
    """
    global _last
    cached = _last
    if cached is not None and cached.message is message:
        return cached
    event = StepEvent.of_message(message)
    if event is None:
        return None
    frame = sse(event.name, event.data, event_id=event.seq)
    cached = StepFrame(message, event.seq, frame, b"%X\r\n%s\r\n" % (len(frame), frame))
    _last = cached
    return cached


_last_token: StepFrame | None = None


def token_frame(message: Message) -> StepFrame:
    """The frame of a published token event (no id: docs/api.md §4), encoded once for all
    the streams that send it, like `step_frame`."""
    global _last_token
    cached = _last_token
    if cached is not None and cached.message is message:
        return cached
    frame = sse("token", message.data)
    cached = StepFrame(message, 0, frame, b"%X\r\n%s\r\n" % (len(frame), frame))
    _last_token = cached
    return cached


def step_event_frame(event: StepEvent) -> bytes:
    """A step event as SSE; a live one from the cache its first stream filled."""
    if event.message is not None:
        cached = step_frame(event.message)
        if cached is not None:
            return cached.frame
    return sse(event.name, event.data, event_id=event.seq)


def ended_frames(ended: Ended) -> bytes:
    """`cancelled` if it was, then always `done`: no ids, they are not steps."""
    summary = ended.summary()
    head = sse("cancelled", summary) if ended.cancelled else b""
    return head + sse("done", summary)


class EventStreamResponse(Response):
    """A streaming response that notes, from what it tells the server, whether the
    server sends its body as HTTP/1.1 chunks on a socket the app may write to (see
    `socket_writer`)."""

    chunked_socket: Any = None  # the client's socket, when the body goes out as chunks

    def __call__(self, environ: Any, start_response: Any) -> Any:
        def noting(status: str, headers: list, exc_info: Any = None) -> Any:
            if sent_as_chunks(environ, status, headers):
                # The client's socket, as gunicorn hands it to the app in its environ.
                self.chunked_socket = environ.get("gunicorn.socket")
            return start_response(status, headers, exc_info)

        return super().__call__(environ, noting)


def sent_as_chunks(environ: dict[str, Any], status: str, headers: list[tuple[str, str]]) -> bool:
    """Whether an HTTP/1.1 server that keeps the connection open must send this body
    as chunks: a 200 with a body (not to a HEAD) and no Content-Length, to an HTTP/1.1
    request. HTTP/1.1 leaves it no other framing (RFC 9112, section 6); gunicorn's
    HTTP worker does so (`server_frames_chunks`)."""
    return (environ.get("SERVER_PROTOCOL") == "HTTP/1.1"
            and environ.get("REQUEST_METHOD") in ("GET", "POST")
            and status.startswith("200 ")
            and not any(name.lower() == "content-length" for name, _ in headers))


def server_frames_chunks(protocol: str, *, tls: bool) -> bool:
    """Whether a gunicorn worker of these settings (`protocol`, `--certfile`) writes a
    chunked body on the client's socket as `StepFrame.chunk` frames it: over HTTP on a
    plain socket; not as uwsgi to a proxy (no chunks), nor over TLS (the socket wraps
    an encrypted stream)."""
    return protocol == "http" and not tls


class SocketWriter:
    """Writes a stream's next live steps straight to its socket, called by the hub's reader.

    The hub offers it a message (`Subscription.writer`) only while the stream's
    greenlet waits in `Subscription.get` with nothing queued; anything queued, or
    the greenlet waking, takes it away — so the hub and the stream never write at
    once. A message it declines (returns False) is queued and wakes the stream,
    which sends it the ordinary way. It declines all but the next step in sequence
    (a gap, a duplicate or a status is the stream's business), a send that would
    block (a slow client: its own greenlet waits for it, the other streams do not)
    and a failed send (a hang-up, which the stream's own write then finds). A step
    sent in part counts as sent; the rest waits in `unsent` for the stream to
    write before anything else. Token events (docs/api.md §6) it writes for a stream
    that asked for them and swallows for one that did not, which then never wakes.
    """

    def __init__(self, sock: Any, *, tokens: bool = False) -> None:
        self.sock = sock
        self.tokens = tokens  # the stream asked for token events
        self.sent_in_part: Message | None = None  # a token event whose rest is `unsent`
        self.fd = sock.fileno()
        self.last_seq = 0  # the stream sets it before each wait and reads it after
        self.wrote_at = 0.0  # time.monotonic() of the last write, for keepalives
        self.unsent = b""

    def __call__(self, message: Message) -> bool:
        if message.kind == "token":
            if not self.tokens:
                return True  # another stream's: taken, and nothing sent, without waking
            if not self._write(token_frame(message)):
                return False
            if self.unsent:
                self.sent_in_part = message  # the stream sends the rest, then skips it
                return False
            return True
        if message.kind != "step":
            return False
        step = step_frame(message)
        if step is None or step.seq != self.last_seq + 1:
            return False
        if self._write(step):
            self.last_seq = step.seq
            return not self.unsent
        return False

    def _write(self, step: StepFrame) -> bool:
        """Write a frame's chunk; False if nothing could be written. What a partial write
        leaves waits in `unsent` (the caller declines the message, which wakes the stream)."""
        try:
            # os.write on the non-blocking descriptor: gevent's socket.send would
            # wait for a slow client here, holding up every other stream. (A closed
            # peer is EPIPE, not a signal: Python ignores SIGPIPE, as gunicorn's own
            # writes rely on.)
            sent = os.write(self.fd, step.chunk)
        except OSError:  # BlockingIOError (its buffer is full), or it hung up
            return False
        self.wrote_at = time.monotonic()
        if sent < len(step.chunk):
            self.unsent = step.chunk[sent:]  # the stream sends the rest, then skips it
        return True

    def flush(self) -> bool:
        """Send what a partial write left (the stream's greenlet waits for it); False on a hang-up."""
        try:
            self.sock.sendall(self.unsent)
        except OSError:
            return False
        self.unsent = b""
        return True


def socket_writer(
    response: EventStreamResponse | None, *, server_chunks: bool, tokens: bool = False
) -> SocketWriter | None:
    """A SocketWriter for this response once its head is sent, or None where it would be unsafe.

    Only under gevent: the hub's reader and every stream are greenlets of one OS
    thread, and neither handing the writer over nor `os.write` switches greenlets,
    so a stream cannot wake half-way through the hub's write. Only where the server
    frames the body as HTTP/1.1 chunks (`server_chunks`: a gunicorn worker started
    by our settings says so, `api.server.ready`; and this response's request and
    head, `sent_as_chunks`), which `StepFrame.chunk` reproduces, on a plain socket
    that is non-blocking underneath, as gevent keeps it. Anywhere else (the
    Werkzeug test client, another server) every event goes through the stream's
    generator. tests/integration/test_api_streaming.py fails if the installed
    gunicorn is not written to this way, or frames the body otherwise.
    """
    sock = getattr(response, "chunked_socket", None)
    if sock is None or not server_chunks or not _greenlets():
        return None
    if isinstance(sock, ssl.SSLSocket):
        return None
    try:
        if os.get_blocking(sock.fileno()):
            return None
    except (OSError, ValueError):
        return None
    return SocketWriter(sock, tokens=tokens)


class DirectStreams:
    """How many open streams have lent the hub a SocketWriter (`/metrics` says it)."""

    def __init__(self) -> None:
        self.count = 0

    def opened(self) -> None:
        self.count += 1

    def closed(self) -> None:
        self.count -= 1


def _greenlets() -> bool:
    try:
        from gevent.monkey import is_module_patched
    except ImportError:  # pragma: no cover - gevent is a dependency of the API
        return False
    return bool(is_module_patched("threading"))
