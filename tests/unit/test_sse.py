"""The SSE wire format and the hub's direct writes: a step encoded once, written as one
HTTP/1.1 chunk in seq order, and a slow or vanished client declined, never waited for."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from api.sse import (
    SocketWriter,
    sent_as_chunks,
    server_frames_chunks,
    socket_writer,
    sse,
    step_frame,
)
from jarvis_agents.events import AGENT_CHANNEL, Message

AGENT = "7a0e3f4c-0000-4000-8000-000000000001"


def step(seq: int, content: str = "thinking") -> Message:
    data = {"agent_id": AGENT, "seq": seq, "step": 0, "type": "think", "content": content}
    return Message(AGENT_CHANNEL.format(AGENT), "step", data)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the server's non-blocking end, as gevent keeps it; the client's end)."""
    server, client = socket.socketpair()
    server.setblocking(False)
    client.settimeout(2)
    yield server, client
    server.close()
    client.close()


def received(client: socket.socket) -> bytes:
    """Everything the client's end has been sent so far."""
    data = b""
    client.setblocking(False)
    try:
        while more := client.recv(1 << 20):
            data += more
    except BlockingIOError:
        pass
    finally:
        client.settimeout(2)
    return data


def chunks(data: bytes) -> list[bytes]:
    """The payloads of HTTP/1.1 chunks, each checked for its framing."""
    payloads = []
    while data:
        size, _, rest = data.partition(b"\r\n")
        length = int(size, 16)
        assert rest[length : length + 2] == b"\r\n"
        payloads.append(rest[:length])
        data = rest[length + 2 :]
    return payloads


def seqs(frames: list[bytes]) -> list[int]:
    return [json.loads(frame.split(b"data: ", 1)[1])["seq"] for frame in frames]


def test_a_step_is_encoded_once_for_every_stream() -> None:
    message = step(3)
    first = step_frame(message)
    assert first is not None and first.seq == 3
    assert first.frame == sse("think", message.data, event_id=3)
    assert step_frame(message) is first  # the next stream finds it encoded
    assert step_frame(step(3)) is not first  # a new message is encoded afresh
    assert step_frame(Message(AGENT_CHANNEL.format(AGENT), "step", {"type": "think"})) is None


def test_the_next_steps_are_written_in_order_as_chunks_and_others_declined(pair) -> None:
    server, client = pair
    writer = SocketWriter(server)
    writer.last_seq = 4  # what the stream has sent itself
    assert writer(step(5)) and writer(step(6))
    assert not writer(step(6))  # a duplicate: the stream skips it
    assert not writer(step(8))  # a gap: the stream reads the record
    assert not writer(Message(AGENT_CHANNEL.format(AGENT), "status", {"status": "COMPLETED"}))
    assert writer.last_seq == 6
    frames = chunks(received(client))
    assert frames == [sse("think", step(5).data, event_id=5), sse("think", step(6).data, event_id=6)]
    assert frames[0].startswith(b"id: 5\nevent: think\ndata: ")


def test_a_client_that_stops_reading_is_declined_at_once_and_loses_nothing(pair) -> None:
    server, client = pair
    writer = SocketWriter(server)
    content = "x" * 3000
    seq = 0
    while writer(step(seq + 1, content)):  # never blocks: the buffer fills, then False
        seq += 1
        assert seq < 10_000, "the socket buffer never filled"
    # The declined step either went in part (counted as sent, the rest kept for the
    # stream to send first) or not at all (the stream sends it the ordinary way).
    assert writer.last_seq in (seq, seq + 1)
    assert bool(writer.unsent) == (writer.last_seq == seq + 1)

    data = received(client)  # the client reads again
    if writer.unsent:
        assert writer.flush()
        data += received(client)
    assert seqs(chunks(data)) == list(range(1, writer.last_seq + 1))


def test_a_client_that_hung_up_is_declined_without_an_error(pair) -> None:
    server, client = pair
    writer = SocketWriter(server)
    client.close()
    assert not writer(step(1)) and writer.last_seq == 0


def test_no_direct_writes_outside_gevent(pair) -> None:
    server, _ = pair
    # Even a chunked server response on a non-blocking socket: without greenlets the
    # hub's reader is another OS thread, which could write while the stream does.
    response = SimpleNamespace(chunked_socket=server)
    assert socket_writer(response, server_chunks=True) is None  # type: ignore[arg-type]
    assert socket_writer(None, server_chunks=True) is None


@pytest.mark.parametrize(("protocol", "method", "status", "headers", "chunks"), [
    ("HTTP/1.1", "GET", "200 OK", [("Content-Type", "text/event-stream")], True),
    ("HTTP/1.1", "POST", "200 OK", [], True),
    ("HTTP/1.0", "GET", "200 OK", [], False),  # no chunks in HTTP/1.0: the close ends it
    ("HTTP/1.1", "HEAD", "200 OK", [], False),  # no body at all
    ("HTTP/1.1", "GET", "200 OK", [("content-length", "12")], False),
    ("HTTP/1.1", "GET", "429 Too Many Requests", [], False),
])
def test_a_body_goes_out_as_chunks_only_where_http_1_1_leaves_no_other_way(
    protocol: str, method: str, status: str, headers: list[tuple[str, str]], chunks: bool
) -> None:
    environ = {"SERVER_PROTOCOL": protocol, "REQUEST_METHOD": method}
    assert sent_as_chunks(environ, status, headers) is chunks


def test_only_a_plain_http_gunicorn_worker_frames_chunks_the_hub_may_write() -> None:
    assert server_frames_chunks("http", tls=False)
    assert not server_frames_chunks("uwsgi", tls=False)
    assert not server_frames_chunks("http", tls=True)


@pytest.mark.parametrize("seq", [None, "three", float("inf"), float("nan")])
def test_a_step_without_a_whole_seq_is_left_to_the_stream(seq: object) -> None:
    # json.loads reads Infinity and NaN; neither may raise in the hub's reader.
    message = Message(AGENT_CHANNEL.format(AGENT), "step", {"seq": seq, "type": "think"})
    assert step_frame(message) is None
