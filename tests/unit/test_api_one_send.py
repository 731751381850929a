"""The gunicorn worker's responses: a whole JSON answer goes out in one send()."""

from __future__ import annotations

from types import SimpleNamespace

from gunicorn.config import Config

from api.server import one_send_response_class


class Socket:
    def __init__(self) -> None:
        self.sends: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sends.append(bytes(data))


def respond(status: str, headers: list[tuple[str, str]], chunks: list[bytes], *,
            method: str = "POST") -> list[bytes]:
    request = SimpleNamespace(version=(1, 1), method=method, should_close=lambda: False)
    sock = Socket()
    response = one_send_response_class()(request, sock, Config())
    write = response.start_response(status, headers)
    for chunk in chunks:
        write(chunk)
    response.close()
    return sock.sends


def test_a_body_with_its_length_goes_out_with_the_head() -> None:
    body = b'{"id":"x"}\n'
    sends = respond("202 ACCEPTED", [("Content-Type", "application/json"),
                                     ("Content-Length", str(len(body))),
                                     ("Location", "/api/v1/agents/x")], [body])
    assert len(sends) == 1
    head, _, rest = sends[0].partition(b"\r\n\r\n")
    assert rest == body
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 202 ACCEPTED"
    assert "Connection: keep-alive" in lines
    assert "Content-Length: 11" in lines and "Location: /api/v1/agents/x" in lines


def test_a_body_without_a_length_is_chunked_as_before() -> None:
    sends = respond("200 OK", [("Content-Type", "text/event-stream")], [b"data: 1\n\n", b"x"])
    assert sends[0].endswith(b"\r\n\r\n") and b"Transfer-Encoding: chunked" in sends[0]
    assert b"".join(sends[1:]) == b"9\r\ndata: 1\n\n\r\n1\r\nx\r\n0\r\n\r\n"


def test_a_body_in_pieces_and_a_head_answer_take_gunicorn_s_path() -> None:
    sends = respond("200 OK", [("Content-Length", "4")], [b"ab", b"cd"])
    assert sends[0].endswith(b"\r\n\r\n") and sends[1:] == [b"ab", b"cd"]
    sends = respond("200 OK", [("Content-Length", "4")], [b"abcd"], method="HEAD")
    assert len(sends) == 1 and sends[0].endswith(b"\r\n\r\n")
