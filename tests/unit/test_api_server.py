"""The gunicorn worker's own answers: the page gunicorn writes for a request it cannot
parse goes out as the contract's JSON error, status and detail kept."""

from __future__ import annotations

import json
import socket

import httpx
from gunicorn import util

from api.server import ErrorPage


def test_gunicorns_error_page_goes_out_as_json_with_its_status_and_detail() -> None:
    page = ErrorPage(socket.socket())
    try:
        # What gunicorn writes for each request it refuses (Worker.handle_error).
        util.write_error(page, 400, "Bad Request", "Invalid HTTP Version 'HTTP/9.9' <&>")
    finally:
        page.sock.close()
    head, _, body = page.as_json().partition(b"\r\n\r\n")
    status_line, *headers = head.decode("latin-1").split("\r\n")
    assert status_line == "HTTP/1.1 400 Bad Request"
    assert "Content-Type: application/json" in headers and "Connection: close" in headers
    assert f"Content-Length: {len(body)}" in headers
    assert json.loads(body) == {"error": {
        "code": "bad_request",
        "message": "the request is malformed (Invalid HTTP Version 'HTTP/9.9' <&>)"}}


def test_a_status_without_a_sentence_of_ours_keeps_gunicorns_reason() -> None:
    page = ErrorPage(socket.socket())
    try:
        util.write_error(page, 417, "Expectation Failed", "")
    finally:
        page.sock.close()
    answer = httpx.Response(417, content=page.as_json().partition(b"\r\n\r\n")[2])
    assert answer.json() == {"error": {"code": "expectation_failed",
                                       "message": "Expectation Failed"}}
