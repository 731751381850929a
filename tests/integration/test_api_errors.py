"""Isolation and bad input: 401 without a key, 404 for another user's agent, a table of
malformed requests that must each be a 4xx in the contract's error shape, and requests
so malformed that the HTTP server answers them itself, in the same shape."""

from __future__ import annotations

import base64
import json
import re
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.api_server import Api

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api

SOME_ID = "7b0c3f7e-8a51-4a43-9d7e-2f1f5d9c0a11"
PROTECTED = [
    ("POST", "/api/v1/agents"),
    ("POST", "/api/v1/agents/stream"),
    ("GET", "/api/v1/agents"),
    ("GET", f"/api/v1/agents/{SOME_ID}"),
    ("GET", f"/api/v1/agents/{SOME_ID}/steps"),
    ("GET", f"/api/v1/agents/{SOME_ID}/events"),
    ("DELETE", f"/api/v1/agents/{SOME_ID}"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/tools"),
]
PUBLIC = ["/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/"]


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The contract's error: the status, JSON, exactly {"error": {"code", "message"}}."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert re.fullmatch(r"[a-z]+(_[a-z0-9]+)*", body["error"]["code"]), body
    assert len(body["error"]["message"]) > 10, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


@pytest.fixture(scope="module")
def api(shared_api) -> Api:
    return shared_api()


@pytest.fixture(scope="module")
def key(api: Api) -> str:
    return api.user()


@pytest.mark.parametrize(("method", "path"), PROTECTED)
@pytest.mark.parametrize(
    "authorization", [None, "Bearer jrv_not-a-key", "Basic dXNlcjpwYXNz", "Bearer", "jrv_raw"]
)
def test_protected_routes_need_a_valid_key(api: Api, method, path, authorization):
    headers = {"Authorization": authorization} if authorization is not None else {}
    with api.client() as http:
        response = http.request(method, path, headers=headers, json={"goal": "x"})
    assert_error(response, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_every_documented_operation_but_the_public_ones_needs_a_key(api: Api):
    """Read from the OpenAPI document, so that an endpoint added later is covered too."""
    with api.client() as http:
        document = http.get("/api/v1/openapi.json").json()
        refused = []
        for path, operations in document["paths"].items():
            if path in PUBLIC:
                continue
            concrete = re.sub(r"\{[^}]+\}", SOME_ID, path)
            for method in operations:
                if method not in {"get", "post", "put", "patch", "delete"}:
                    continue
                response = http.request(method.upper(), concrete, json={"goal": "x"})
                if response.status_code != 401:
                    refused.append(f"{method.upper()} {path}: {response.status_code}")
                else:
                    assert_error(response, 401, "unauthorized")
    assert not refused, f"answered without a key: {refused}"
    assert any(path.startswith("/api/v1/assistants") for path in document["paths"])


@pytest.mark.parametrize("path", PUBLIC)
def test_operator_endpoints_need_no_key(api: Api, path):
    with api.client() as http:
        response = http.get(path)
    # /readyz is 503 here (no model server), which is an answer, not a refusal.
    assert response.status_code in (200, 503) if path == "/readyz" else response.status_code == 200


def test_the_scheme_is_case_insensitive(api: Api, key: str):
    with api.client() as http:
        assert http.get("/api/v1/tools", headers={"Authorization": f"bearer {key}"}).status_code == 200


def test_another_users_agent_does_not_exist_for_them(api: Api, key: str):
    with api.client(key) as alice, api.client(api.user()) as bob:
        agent = alice.post("/api/v1/agents", json={"goal": "alice's secret"}).json()
        url = f"/api/v1/agents/{agent['id']}"
        for method, path, params in [
            ("GET", url, {}), ("GET", url, {"wait": 1}), ("GET", f"{url}/steps", {}),
            ("GET", f"{url}/events", {}), ("DELETE", url, {}),
        ]:
            error = assert_error(bob.request(method, path, params=params), 404, "not_found")
            assert "alice" not in error["message"]
        assert agent["id"] not in json.dumps(bob.get("/api/v1/agents").json())
        assert alice.get(url).json()["status"] == "PENDING"  # Bob's DELETE changed nothing
        alice.delete(url)


@dataclass
class Bad:
    """A malformed request and the answer it must get."""

    name: str
    method: str
    path: str
    status: int = 400
    code: str | None = None
    json: Any = None
    content: bytes | str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


AGENTS = "/api/v1/agents"
ONE = f"{AGENTS}/{SOME_ID}"
JSON_HEADERS = {"Content-Type": "application/json"}
BAD_REQUESTS = [
    Bad("bad JSON", "POST", AGENTS, content='{"goal": ', headers=JSON_HEADERS, code="invalid_json"),
    Bad("JSON array body", "POST", AGENTS, json=[{"goal": "x"}], code="invalid_json"),
    Bad("JSON string body", "POST", AGENTS, json="do something", code="invalid_json"),
    Bad("empty body", "POST", AGENTS, content=b"", headers=JSON_HEADERS, code="invalid_json"),
    Bad("NaN is not JSON", "POST", AGENTS, content='{"goal": "x", "max_steps": NaN}',
        headers=JSON_HEADERS, code="invalid_json"),
    Bad("body of 30,000 nested arrays", "POST", AGENTS, content="[" * 30_000,
        headers=JSON_HEADERS, code="invalid_json"),
    Bad("field of 900 nested arrays", "POST", AGENTS,
        content='{"goal": "x", "tools": ' + "[" * 900 + "]" * 900 + "}", headers=JSON_HEADERS,
        code="invalid_request"),
    Bad("not UTF-8", "POST", AGENTS, content=b'{"goal": "\xff\xfe"}', headers=JSON_HEADERS,
        code="invalid_json"),
    Bad("form content type", "POST", AGENTS, content="goal=x",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        code="unsupported_content_type"),
    Bad("goal missing", "POST", AGENTS, json={"max_steps": 3}, code="invalid_request"),
    Bad("goal not a string", "POST", AGENTS, json={"goal": 42}, code="invalid_request"),
    Bad("blank goal", "POST", AGENTS, json={"goal": " \t\n "}, code="invalid_request"),
    Bad("empty goal", "POST", AGENTS, json={"goal": ""}, code="invalid_request"),
    Bad("4001-char goal", "POST", AGENTS, json={"goal": "x" * 4001}, code="invalid_request"),
    Bad("NUL in goal", "POST", AGENTS, json={"goal": "a\u0000b"}, code="invalid_request"),
    Bad("lone surrogate in goal", "POST", AGENTS, content='{"goal": "\\ud800"}',
        headers=JSON_HEADERS, code="invalid_request"),
    Bad("bool max_steps", "POST", AGENTS, json={"goal": "x", "max_steps": True},
        code="invalid_request"),
    Bad("float max_steps", "POST", AGENTS, json={"goal": "x", "max_steps": 5.0},
        code="invalid_request"),
    Bad("string max_steps", "POST", AGENTS, json={"goal": "x", "max_steps": "5"},
        code="invalid_request"),
    Bad("max_steps 0", "POST", AGENTS, json={"goal": "x", "max_steps": 0}, code="invalid_request"),
    Bad("max_steps 51", "POST", AGENTS, json={"goal": "x", "max_steps": 51}, code="invalid_request"),
    Bad("blank model", "POST", AGENTS, json={"goal": "x", "model": " "}, code="invalid_request"),
    Bad("tools not a list", "POST", AGENTS, json={"goal": "x", "tools": "calculate"},
        code="invalid_request"),
    Bad("21 tools", "POST", AGENTS, json={"goal": "x", "tools": ["calculate"] * 21},
        code="invalid_request"),
    Bad("unknown tool", "POST", AGENTS, json={"goal": "x", "tools": ["calculate", "rm -rf"]},
        code="unknown_tool"),
    Bad("near-miss tool", "POST", AGENTS, json={"goal": "x", "tools": ["webSearch"]},
        code="unknown_tool"),
    Bad("unknown field", "POST", AGENTS, json={"goal": "x", "priority": "high"},
        code="invalid_request"),
    Bad("ftp webhook_url", "POST", AGENTS, json={"goal": "x", "webhook_url": "ftp://example.com/"},
        code="invalid_request"),
    Bad("webhook_url without a secret", "POST", AGENTS,
        json={"goal": "x", "webhook_url": "https://example.com/hook"}, code="webhooks_disabled"),
    Bad("webhook_url to loopback", "POST", AGENTS,
        json={"goal": "x", "webhook_url": "http://127.0.0.1:8080/hook"},
        code="webhook_url_not_allowed", env={"JARVIS_WEBHOOK_SECRET": "s3cret"}),
    Bad("webhook_url to a private network", "POST", AGENTS,
        json={"goal": "x", "webhook_url": "http://10.1.2.3/hook"},
        code="webhook_url_not_allowed", env={"JARVIS_WEBHOOK_SECRET": "s3cret"}),
    Bad("Idempotency-Key over 255 chars", "POST", AGENTS, json={"goal": "x"},
        headers={"Idempotency-Key": "k" * 256}, code="invalid_idempotency_key"),
    Bad("1 MB body", "POST", AGENTS, status=413, code="payload_too_large",
        content=json.dumps({"goal": "x" * 1_000_000}), headers=JSON_HEADERS),
    Bad("bad body on the stream", "POST", f"{AGENTS}/stream", json={"goal": ""},
        code="invalid_request"),
    Bad("malformed UUID", "GET", f"{AGENTS}/not-a-uuid", status=404, code="not_found"),
    Bad("malformed UUID on steps", "GET", f"{AGENTS}/123/steps", status=404, code="not_found"),
    Bad("malformed UUID on events", "GET", f"{AGENTS}/x/events", status=404, code="not_found"),
    Bad("malformed UUID on DELETE", "DELETE", f"{AGENTS}/1234", status=404, code="not_found"),
    Bad("unknown agent", "GET", ONE, status=404, code="not_found"),
    Bad("unknown status", "GET", AGENTS, params={"status": "DONE"}, code="invalid_status"),
    Bad("limit 0", "GET", AGENTS, params={"limit": "0"}, code="invalid_limit"),
    Bad("limit 101", "GET", AGENTS, params={"limit": "101"}, code="invalid_limit"),
    Bad("limit not a number", "GET", AGENTS, params={"limit": "ten"}, code="invalid_limit"),
    Bad("limit a fraction", "GET", AGENTS, params={"limit": "2.5"}, code="invalid_limit"),
    Bad("malformed cursor", "GET", AGENTS, params={"cursor": "not-a-cursor"},
        code="invalid_cursor"),
    Bad("empty cursor", "GET", AGENTS, params={"cursor": ""}, code="invalid_cursor"),
    Bad("cursor of 3,000 nested arrays", "GET", AGENTS,
        params={"cursor": base64.urlsafe_b64encode(b"[" * 3000).decode()}, code="invalid_cursor"),
    Bad("cursor of 150 nested arrays", "GET", AGENTS,
        params={"cursor": base64.urlsafe_b64encode(b"[" * 150 + b"]" * 150).decode()},
        code="invalid_cursor"),
    Bad("cursor of a JSON object", "GET", AGENTS,
        params={"cursor": base64.urlsafe_b64encode(b'{"a": 1, "b": 2}').decode()},
        code="invalid_cursor"),
    Bad("negative after", "GET", f"{ONE}/steps", params={"after": "-1"}, code="invalid_after"),
    Bad("after not a number", "GET", f"{ONE}/events", params={"after": "x"},
        code="invalid_after"),
    Bad("bad Last-Event-ID", "GET", f"{ONE}/events", headers={"Last-Event-ID": "seven"},
        code="invalid_last_event_id"),
    Bad("wait over 60", "GET", ONE, params={"wait": "61"}, code="invalid_wait"),
    Bad("negative wait", "GET", ONE, params={"wait": "-1"}, code="invalid_wait"),
    Bad("wait not a number", "GET", ONE, params={"wait": "soon"}, code="invalid_wait"),
    Bad("wait NaN", "GET", ONE, params={"wait": "nan"}, code="invalid_wait"),
    Bad("wrong method", "PUT", AGENTS, status=405, code="method_not_allowed", json={"goal": "x"}),
    Bad("wrong method on an agent", "POST", ONE, status=405, code="method_not_allowed"),
    Bad("unknown path", "GET", "/api/v1/nothing-here", status=404, code="not_found"),
    Bad("unknown path outside the API", "GET", "/wp-admin.php", status=404, code="not_found"),
]


@pytest.mark.parametrize("bad", BAD_REQUESTS, ids=lambda bad: bad.name)
def test_malformed_requests_get_a_4xx_in_the_error_shape(shared_api, bad: Bad):
    api = shared_api(**bad.env)
    with api.client(api.user()) as http:
        response = http.request(
            bad.method, bad.path, json=bad.json, content=bad.content, headers=bad.headers,
            params=bad.params,
        )
    assert_error(response, bad.status, bad.code)
    if bad.status == 405:
        assert "GET" in response.headers["Allow"]


def test_a_public_webhook_url_is_accepted_when_a_secret_is_configured(shared_api):
    api = shared_api(JARVIS_WEBHOOK_SECRET="s3cret")
    with api.client(api.user()) as http:
        # A literal public address: no DNS needed, and nothing is sent until the agent ends.
        created = http.post(AGENTS, json={"goal": "x", "webhook_url": "http://93.184.215.14/hook"})
        assert created.status_code == 202, created.text
        assert created.json()["webhook_url"] == "http://93.184.215.14/hook"
        http.delete(created.headers["Location"])


def test_optional_fields_are_applied(api: Api, key: str):
    with api.client(key) as http:
        created = http.post(AGENTS, json={
            "goal": "x", "max_steps": 3, "model": "test-model", "tools": ["CALCULATE", "getTime"],
            "webhook_url": None,
        })
        agent = created.json()
        assert created.status_code == 202, agent
        assert (agent["max_steps"], agent["model"]) == (3, "test-model")
        assert agent["tools"] == ["calculate", "getTime"]
        http.delete(created.headers["Location"])
        tools = http.get("/api/v1/tools").json()["tools"]
        assert {t["name"] for t in tools} >= {"calculate", "getTime", "getWeather", "search"}
        assert all(set(t) == {"name", "description", "source", "input_schema"} and t["description"]
                   and t["source"] == "builtin" and t["input_schema"]["type"] == "object"
                   for t in tools)


def test_a_random_agent_id_is_a_404(api: Api, key: str):
    with api.client(key) as http:
        assert_error(http.delete(f"{AGENTS}/{uuid.uuid4()}"), 404, "not_found")


# --- requests gunicorn refuses before the app sees them ------------------------------------

HOST = b"Host: 127.0.0.1\r\n"
PROTOCOL_ERRORS = [
    ("not an HTTP request line", b"GARBAGE\r\n\r\n", 400, "bad_request"),
    ("an unknown HTTP version", b"GET /healthz HTTP/9.9\r\n" + HOST + b"\r\n", 400, "bad_request"),
    ("a request line over 8190 bytes",
     b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414, "uri_too_long"),
    ("a header over 8190 bytes",
     b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n", 431,
     "headers_too_large"),
    ("more than 100 headers",
     b"GET /healthz HTTP/1.1\r\n" + HOST + b"".join(b"X-%d: 1\r\n" % i for i in range(120)) + b"\r\n",
     431, "headers_too_large"),
    ("a header name with a space", b"GET /healthz HTTP/1.1\r\n" + HOST + b"Bad Name: 1\r\n\r\n",
     400, "bad_request"),
    ("an unsupported transfer coding",
     b"POST /api/v1/agents HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: gzip\r\n\r\n", 400,
     "bad_request"),
]


def raw_exchange(api: Api, request: bytes) -> httpx.Response:
    """Send bytes no HTTP client would; read the answer until the server closes."""
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)  # nothing more: the server reads what there is, then answers
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return httpx.Response(int(status_line.split()[1]), headers=headers, content=body)


@pytest.mark.parametrize(("name", "request_bytes", "status", "code"), PROTOCOL_ERRORS,
                         ids=[error[0] for error in PROTOCOL_ERRORS])
def test_a_request_the_server_cannot_parse_gets_the_json_error_shape(
    api: Api, name: str, request_bytes: bytes, status: int, code: str
):
    response = raw_exchange(api, request_bytes)
    assert_error(response, status, code)
    assert response.headers["Connection"] == "close"
