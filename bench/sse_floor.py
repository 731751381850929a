"""Scenario 3's floor: one Python process writing one pre-encoded frame to every stream.

The same client processes as the real runs (`bench.sse_clients.Subscribers`) connect
to this process instead of the API. It answers each `GET …/events` with the head
the API sends, then, for every event: takes the time (the "publish"), encodes ONE
chunk — the SSE frame the API would send, framed as gunicorn frames a chunk — and
writes it to every socket with a plain non-blocking `send()` in a tight loop. No
Redis, no greenlets, no per-stream work beyond that loop: what one event on 1,000
streams costs this machine's kernel and these clients. The API cannot beat it.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from typing import Any

from bench.clients import SPAWN
from jarvis_agents.events import step_event
from jarvis_agents.lifecycle import Step, StepType, utcnow

HEAD = (
    b"HTTP/1.1 200 OK\r\nServer: floor\r\nConnection: keep-alive\r\n"
    b"Transfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk, byte for byte as gunicorn writes it."""
    return b"%X\r\n%s\r\n" % (len(data), data)


def frame(agent_id: uuid.UUID, seq: int) -> bytes:
    """The API's SSE frame for a THINK step whose content is the publish time."""
    step = Step(seq, 0, StepType.THINK, f"{time.time():.6f}", created_at=utcnow())
    data = json.dumps(step_event(agent_id, step), ensure_ascii=False)
    return f"id: {seq}\nevent: think\ndata: {data}\n\n".encode()


def _read_head(conn: socket.socket) -> None:
    received = b""
    while b"\r\n\r\n" not in received:
        data = conn.recv(4096)
        if not data:
            raise ConnectionError("a client hung up before its request was complete")
        received += data


def _serve(streams: int, control: Any, report: Any) -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    report.put(("port", listener.getsockname()[1]))
    conns: list[socket.socket] = []
    while len(conns) < streams:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _read_head(conn)
        conn.sendall(HEAD + chunk(b": keepalive\n\n"))
        conn.setblocking(False)
        conns.append(conn)
    rounds, interval_s = control.get()
    agent_id = uuid.uuid4()
    loops: list[float] = []
    short = 0
    next_at = time.monotonic()
    for seq in range(1, rounds + 1):
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        started = time.perf_counter()
        data = chunk(frame(agent_id, seq))
        for conn in conns:
            if conn.send(data) != len(data):
                short += 1  # never with these sizes; counted so that it would show
        loops.append(time.perf_counter() - started)
        next_at += interval_s
    report.put(("sent", {"loop_s": loops, "short_sends": short, "frame_bytes": len(data)}))
    control.get()  # the clients have what they will get
    for conn in conns:
        conn.close()
    listener.close()


class FloorServer:
    """The floor's writer process: start(), connect the clients, send(), then close()."""

    def __init__(self, streams: int) -> None:
        self.control = SPAWN.Queue()
        self.report = SPAWN.Queue()
        self.process = SPAWN.Process(
            target=_serve, args=(streams, self.control, self.report), daemon=True
        )

    def start(self, *, timeout_s: float = 60) -> str:
        """Start it; its base URL."""
        self.process.start()
        kind, port = self.report.get(timeout=timeout_s)
        assert kind == "port", kind
        return f"http://127.0.0.1:{port}"

    def send(self, *, rounds: int, interval_s: float) -> None:
        """Write `rounds` events, `interval_s` apart, to every connected stream."""
        self.control.put((rounds, interval_s))

    def close(self, *, timeout_s: float = 60) -> dict[str, Any]:
        """What the writer measured: each event's send loop (seconds) and short sends."""
        kind, sent = self.report.get(timeout=timeout_s)
        assert kind == "sent", kind
        self.control.put("close")
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
        return sent
