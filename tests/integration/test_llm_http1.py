"""The minimal HTTP/1.1 client of the Ollama adapter, against a raw socket server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from jarvis_agents.llm import http1
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.llm.ollama import OllamaChatModel

Answer = Callable[[socket.socket, bytes], bool]  # (connection, request) → keep it open?


class RawServer:
    """Reads one request at a time per connection and lets `answer` write the bytes back."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
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


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], RawServer]]:
    servers: list[RawServer] = []

    def start(answer: Answer) -> RawServer:
        servers.append(RawServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def connection(server: RawServer) -> http1.Connection:
    return http1.Connection(http1.Origin("127.0.0.1", server.port, f"127.0.0.1:{server.port}"))


def post(conn: http1.Connection, body: bytes = b"{}") -> http1.Response:
    conn.open(connect_timeout_s=2)
    head = b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    return conn.request(head, body, read_timeout_s=2)


def chunked(conn: socket.socket, body: bytes) -> bool:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nab\n\r\n" + b"%x\r\n%s\r\n" % (len(body), body) + b"0\r\nX-Trailer: 1\r\n\r\n"
    )
    return True


def test_a_chunked_reply_is_read_and_the_connection_carries_the_next_request(serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(chunked)
    conn = connection(server)
    for body in (b"first", b"second"):
        response = post(conn, body)
        assert response.status == 200
        assert response.read() == b"ab\n" + body
        assert response.reusable
    assert server.connections == 1
    assert server.requests[1].endswith(b"Content-Length: 6\r\n\r\nsecond")
    conn.close()


@pytest.mark.parametrize("piece", [1, 2, 7, 4096])
def test_a_chunked_reply_split_anywhere_by_the_network_reads_the_same(serve, piece: int) -> None:  # type: ignore[no-untyped-def]
    """Chunks that arrive together are handed on together; cut anywhere (a size line,
    a chunk's data, its CRLF, the trailers), the body and the next request are intact."""
    lines = [b'{"message":{"content":" w%d"},"done":false}\n' % i for i in range(12)]
    wire = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(line), line) for line in lines)
            + b"0\r\nX-Trailer: 1\r\n\r\n")

    def answer(conn: socket.socket, body: bytes) -> bool:
        for start in range(0, len(wire), piece):
            conn.sendall(wire[start:start + piece])
            if piece < 4096:
                time.sleep(0.0005)  # separate reads, most of the time
        return True

    conn = connection(serve(answer))
    for _ in range(2):
        response = post(conn)
        parts = list(response.iter_body())
        assert b"".join(parts) == b"".join(lines)
        assert response.reusable
    if piece == 4096:
        assert len(parts) == 1  # one read brought them all: one piece, not twelve
    conn.close()


def test_a_chunk_without_its_crlf_breaks_the_connection(serve) -> None:  # type: ignore[no-untyped-def]
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n")
        return True

    conn = connection(serve(answer))
    response = post(conn)
    with pytest.raises(http1.ConnectionBroke, match="CRLF"):
        response.read()
    assert not response.reusable
    conn.close()


def test_content_length_and_connection_close(serve) -> None:  # type: ignore[no-untyped-def]
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope!")
        return False

    conn = connection(serve(answer))
    response = post(conn)
    assert (response.status, response.read()) == (404, b"nope!")
    assert response.complete and not response.reusable
    conn.close()


def test_a_body_without_framing_ends_with_the_connection(serve) -> None:  # type: ignore[no-untyped-def]
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nall of it")
        return False

    conn = connection(serve(answer))
    response = post(conn)
    assert response.read() == b"all of it"
    assert not response.reusable
    conn.close()


def test_a_kept_connection_the_server_closed_is_replaced_before_use(serve) -> None:  # type: ignore[no-untyped-def]
    def answer(conn: socket.socket, body: bytes) -> bool:
        chunked(conn, body)
        return False  # closes after the reply, though it promised to keep it

    server = serve(answer)
    conn = connection(server)
    assert post(conn).read() == b"ab\n{}"
    threading.Event().wait(0.05)  # the FIN arrives
    assert post(conn).read() == b"ab\n{}"
    assert server.connections == 2
    conn.close()


def test_a_reused_connection_ending_before_the_reply_may_be_retried(serve) -> None:  # type: ignore[no-untyped-def]
    answers = iter([True, False])

    def answer(conn: socket.socket, body: bytes) -> bool:
        if next(answers):
            return chunked(conn, body)
        conn.shutdown(socket.SHUT_RDWR)  # the request read, nothing answered
        return False

    conn = connection(serve(answer))
    assert post(conn).read() == b"ab\n{}"
    with pytest.raises(http1.ConnectionBroke) as broke:
        post(conn).read()
    assert broke.value.retry_fresh
    conn.close()


def test_a_silent_server_and_a_refused_connection(serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(lambda conn, body: True)  # reads the request, never answers
    conn = connection(server)
    with pytest.raises(http1.ReadTimedOut):
        conn.open(connect_timeout_s=2)
        conn.request(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"", read_timeout_s=0.1)
    conn.close()
    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()  # nothing listens there
    refused = http1.Connection(http1.Origin("127.0.0.1", port, f"127.0.0.1:{port}"))
    with pytest.raises(http1.ConnectFailed, match="connection refused"):
        refused.open(connect_timeout_s=2)


def test_each_read_waits_no_later_than_the_deadline(serve) -> None:  # type: ignore[no-untyped-def]
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        time.sleep(0.3)
        conn.sendall(b"3\r\nab\n\r\n")
        time.sleep(2)  # then silence
        return False

    conn = connection(serve(answer))
    conn.open(connect_timeout_s=2)
    head = b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    started = time.monotonic()
    response = conn.request(head, b"", read_timeout_s=5, deadline=started + 0.5)
    body = response.iter_body()
    assert next(body) == b"ab\n"
    with pytest.raises(http1.ReadTimedOut):
        next(body)
    assert 0.45 < time.monotonic() - started < 0.65  # not 0.3 s + the 0.5 s left at first
    with pytest.raises(http1.ReadTimedOut):  # a deadline already passed: at once
        conn.request(head, b"", read_timeout_s=5, deadline=time.monotonic() - 1)
    conn.close()


def test_a_socket_is_attached_before_it_connects_and_attach_may_give_up(serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(chunked)
    conn = connection(server)
    attached: list[socket.socket] = []

    def give_up(sock: socket.socket) -> None:
        attached.append(sock)
        assert sock.fileno() >= 0
        with pytest.raises(OSError):
            sock.getpeername()  # not connected yet: another thread could still stop it
        raise http1.ConnectFailed("cancelled")

    with pytest.raises(http1.ConnectFailed, match="cancelled"):
        conn.open(connect_timeout_s=2, attach=give_up)
    assert attached and attached[0].fileno() == -1  # closed, never connected
    assert conn.sock is None
    conn.open(connect_timeout_s=2, attach=attached.append)
    assert attached[-1] is conn.sock
    assert post(conn).read() == b"ab\n{}"
    conn.close()
    assert server.connections == 1


PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")


def test_an_environment_proxy_sends_the_model_call_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with OllamaChatModel(host="http://ollama.internal:11434") as model:
        assert not model._proxied
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    with OllamaChatModel(host="http://ollama.internal:11434") as model:
        assert model._proxied
    monkeypatch.setenv("NO_PROXY", "ollama.internal")
    with OllamaChatModel(host="http://ollama.internal:11434") as model:
        assert not model._proxied


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "through-a-proxy"])
def test_a_host_with_a_path_prefix_keeps_it_in_the_model_call(  # type: ignore[no-untyped-def]
    serve, monkeypatch: pytest.MonkeyPatch, proxied: bool
) -> None:
    # Ollama behind a reverse proxy at /ollama: readiness (the ollama client) keeps
    # the prefix, so the chat must too.
    def answer(conn: socket.socket, body: bytes) -> bool:
        line = b'{"message":{"content":"hi"},"done":true}\n'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(line), line))
        return True

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    server = serve(answer)
    if proxied:  # the raw server is the forward proxy: it sees the absolute URL
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
        host, request_line = "http://ollama.internal:11434/ollama", (
            b"POST http://ollama.internal:11434/ollama/api/chat HTTP/1.1\r\n")
    else:
        host, request_line = f"http://127.0.0.1:{server.port}/ollama", (
            b"POST /ollama/api/chat HTTP/1.1\r\n")
    with OllamaChatModel(host=host, retries=1) as model:
        assert model._proxied is proxied
        reply = model.chat([ChatMessage("user", "x")], model="m", stop=[],
                           deadline=time.monotonic() + 5, should_stop=lambda: False)
    assert reply == "hi"
    assert server.requests[0].startswith(request_line)


def _stream(lines: list[bytes]) -> Answer:
    """A reply whose NDJSON lines all go out in one chunk, so that one read brings them."""
    def answer(conn: socket.socket, body: bytes) -> bool:
        data = b"".join(lines)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        return True

    return answer


def _chat(server: RawServer) -> str:
    with OllamaChatModel(host=f"http://127.0.0.1:{server.port}", retries=1) as model:
        return model.chat([ChatMessage("user", "x")], model="m", stop=[],
                          deadline=time.monotonic() + 5, should_stop=lambda: False)


def test_lines_read_together_are_read_up_to_the_done_line_only(serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(_stream([
        b'{"message":{"content":"THOUGHT: \\u00e9t\\u00e9"},"done":false}\n',
        b'{"message":{"content":" done"},"done":false}\n\n',
        b'{"message":{"content":""},"done":true}\n',
        b"whatever comes after the done line is not read\n",
    ]))
    assert _chat(server) == "THOUGHT: été done"


def test_an_error_line_among_lines_read_together_is_the_models_error(serve) -> None:  # type: ignore[no-untyped-def]
    from jarvis_agents.errors import ModelError

    server = serve(_stream([
        b'{"message":{"content":"THOUGHT:"},"done":false}\n',
        b'{"error":"the runner crashed"}\n',
    ]))
    with pytest.raises(ModelError, match="the runner crashed"):
        _chat(server)
