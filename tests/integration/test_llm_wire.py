"""One HTTP/1.1 exchange (llm/wire.py) against a server that writes the bytes itself."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from jarvis_agents.llm import wire
from tests.support.raw_http import Answer, RawServer, raw_server

LINES = [b'{"message":{"content":" w%d"},"done":false}\n' % i for i in range(12)]
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(line), line) for line in LINES)
           + b"0\r\nX-Trailer: 1\r\n\r\n")


Connect = Callable[[RawServer], socket.socket]


@pytest.fixture
def connect() -> Iterator[Connect]:
    opened: list[socket.socket] = []

    def to(server: RawServer) -> socket.socket:
        opened.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        return opened[-1]

    yield to
    for sock in opened:
        sock.close()


def post(sock: socket.socket, body: bytes = b"{}") -> wire.Response:
    wire.send(sock, "POST", "/api/chat", host="x", headers={"Content-Type": "application/json"},
              body=body)
    return wire.Response(sock)


def writes(wire_bytes: bytes, *, piece: int) -> Answer:
    """An answer that writes `wire_bytes` `piece` bytes at a time, as a network may cut it."""
    def answer(conn: socket.socket, body: bytes) -> bool:
        for start in range(0, len(wire_bytes), piece):
            conn.sendall(wire_bytes[start:start + piece])
            if piece < 4096:
                time.sleep(0.0005)  # separate reads, most of the time
        return True

    return answer


def test_a_request_is_its_line_its_headers_its_length_and_its_body(connect: Connect) -> None:
    with raw_server(writes(CHUNKED, piece=4096)) as server:
        sock = connect(server)
        post(sock, b'{"model":"m"}').read()
    assert server.requests == [(
        b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 13\r\n\r\n{"model":"m"}'
    )]


@pytest.mark.parametrize("piece", [1, 2, 7, 4096])
def test_a_chunked_reply_split_anywhere_reads_the_same_and_leaves_the_connection_usable(
    connect: Connect, piece: int
) -> None:
    """Cut anywhere (a size line, a chunk's data, its CRLF, the trailers), the body and
    the next exchange on the connection are intact; chunks that arrive together are
    handed on together."""
    with raw_server(writes(CHUNKED, piece=piece)) as server:
        sock = connect(server)
        for _ in range(2):
            response = post(sock)
            parts = list(response.chunks())
            assert (response.status, b"".join(parts)) == (200, b"".join(LINES))
            assert response.reusable
        if piece == 4096:
            assert len(parts) == 1  # one read brought them all: one piece, not twelve
    assert server.connections == 1


def test_a_chunk_without_its_crlf_is_a_protocol_error(connect: Connect) -> None:
    wrong = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n"
    with raw_server(writes(wrong, piece=4096)) as server:
        response = post(connect(server))
        with pytest.raises(wire.ProtocolError, match="CRLF"):
            response.read()
        assert not response.reusable


def test_a_reply_cut_short_is_a_protocol_error(connect: Connect) -> None:
    def cut(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(CHUNKED[:120])
        return False  # and close

    with raw_server(cut) as server:
        response = post(connect(server))
        with pytest.raises(wire.ProtocolError, match="closed the connection"):
            response.read()


def test_a_length_framed_reply_and_connection_close(connect: Connect) -> None:
    reply = b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope!"
    with raw_server(writes(reply, piece=4096)) as server:
        response = post(connect(server))
        assert (response.status, response.read()) == (404, b"nope!")
        assert response.complete and not response.reusable


def test_a_body_without_framing_ends_with_the_connection(connect: Connect) -> None:
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nall ")
        threading.Event().wait(0.05)
        conn.sendall(b"of it")
        return False

    with raw_server(answer) as server:
        response = post(connect(server))
        assert response.read() == b"all of it"
        assert not response.reusable


def test_an_interim_answer_is_skipped_and_a_coding_not_asked_for_refused(connect: Connect) -> None:
    continued = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    with raw_server(writes(continued, piece=4096)) as server:
        response = post(connect(server))
        assert (response.status, response.read()) == (200, b"ok")
    gzipped = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok"
    with raw_server(writes(gzipped, piece=4096)) as server, \
            pytest.raises(wire.ProtocolError, match="gzip"):
        post(connect(server))


def test_what_is_not_http_is_a_protocol_error(connect: Connect) -> None:
    with raw_server(writes(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", piece=4096)) as server, \
            pytest.raises(wire.ProtocolError, match="not an HTTP/1 response"):
        post(connect(server))
