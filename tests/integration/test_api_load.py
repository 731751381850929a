"""Concurrency: a hundred agents at once on one worker, and a thousand open SSE streams
on one API process."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.support.api_server import CALC_SCRIPT, wait_until
from tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api

AGENTS = 100
STREAMS = 1000


def test_one_worker_runs_a_hundred_slow_agents_at_once(
    api_env, start_api, start_worker, fake_ollama
):
    """Correctness under load: every agent completes with its answer, none fails.

    How fast is measured in `bench/` (scenario 2, I/O-bound concurrency: 200 such agents
    on one worker process against a makespan target), not asserted here.
    """
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    fake_ollama.latency_s = 2.0  # per model call; two calls per agent
    env = {**api_env, "JARVIS_MAX_ACTIVE_PER_USER": str(AGENTS)}
    api = start_api(env)
    start_worker(env)  # the default concurrency
    with api.client(api.user()) as http:
        created = set()
        for i in range(AGENTS):
            response = http.post("/api/v1/agents", json={"goal": f"agent {i}"})
            assert response.status_code == 202, response.text
            created.add(response.json()["id"])

        def ended() -> list[dict]:
            agents = http.get("/api/v1/agents", params={"limit": 100}).json()["agents"]
            done = [a for a in agents if a["status"] in {"COMPLETED", "FAILED", "CANCELLED"}]
            return agents if len(done) == AGENTS else []

        # One after another they would take 400 s; a worker that runs them at once, ~4 s.
        agents = wait_until(ended, timeout_s=60, interval_s=0.25)
    assert {a["id"] for a in agents} == created
    assert [a for a in agents if a["status"] != "COMPLETED"] == []
    assert {a["final_answer"] for a in agents} == {"1113068"}
    assert {a["step_count"] for a in agents} == {2}


def test_one_api_process_holds_a_thousand_streams(api_env, start_api):
    api = start_api({**api_env, "JARVIS_MAX_STREAMS_PER_USER": str(STREAMS)})  # one user's
    key = api.user()
    host, port = api.url.removeprefix("http://").split(":")
    request = (
        f"GET /api/v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    sockets: list[socket.socket] = []
    try:
        for _ in range(STREAMS):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(request)
            sockets.append(sock)
        for sock in sockets:  # every stream answered: headers and the first keepalive
            head = b""
            while b": keepalive" not in head:
                chunk = sock.recv(4096)
                assert chunk, "the server closed a stream"
                head += chunk
            assert head.startswith(b"HTTP/1.1 200")

        # Still answering; how fast is bench/'s business, not this test's.
        with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}) as http:
            assert http.get("/healthz").status_code == 200
            created = http.post("/api/v1/agents", json={"goal": "still answering"})
            assert created.status_code == 202

        # The status change reached every one of the thousand streams.
        agent_id = created.json()["id"].encode()
        for sock in sockets:
            seen = b""
            while agent_id not in seen:
                chunk = sock.recv(4096)
                assert chunk, "the server closed a stream"
                seen += chunk
    finally:
        for sock in sockets:
            sock.close()

    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}) as http:

        # Every hung-up stream noticed it and let go of its subscription (and of its
        # place among the user's JARVIS_MAX_STREAMS_PER_USER).
        wait_until(lambda: api.open_streams() == 0, timeout_s=10, interval_s=0.2)
        # A HEAD has no body to stream: answered at once, nothing left open.
        head = http.head("/api/v1/events", timeout=5)
        assert head.status_code == 200 and head.headers["Content-Type"] == "text/event-stream"
        assert api.open_streams() == 0
