"""Outages of PostgreSQL connections and webhook receivers, injected into a running system.

Restarts of the PostgreSQL and Redis servers themselves: test_restarts.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.service import CreateRequest
from jarvis_agents.webhooks import check_webhook_url
from tests.faults.conftest import System
from tests.faults.test_worker_death import assert_clean_history


def test_postgres_connections_cut_mid_agent(system: System, fake_ollama: Any, start_worker: Any,
                                            pg_url: str) -> None:
    fake_ollama.latency_s = 1.0
    start_worker(system.env)
    agent = system.create()
    system.wait_until(lambda: len(system.repository.steps_after(agent.id)) >= 1, 20, "first step")
    name = pg_url.rsplit("/", 1)[1]
    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = :name AND pid <> pg_backend_pid()"), {"name": name}).scalar_one()
    admin.dispose()
    assert killed >= 1
    done = system.terminal(agent.id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert (done.attempt, done.losses) == (1, 0)  # its worker was never lost
    assert_clean_history(system, agent.id)


class Receiver:
    """A webhook receiver that fails the first delivery, then verifies signatures."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.deliveries: list[tuple[float, int, bool, dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                expected = "sha256=" + hmac.new(receiver.secret.encode(), body, hashlib.sha256).hexdigest()
                valid = hmac.compare_digest(expected, self.headers.get("X-Jarvis-Signature", ""))
                status = 500 if not receiver.deliveries else 200
                receiver.deliveries.append((time.monotonic(), status, valid, json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_webhook_is_signed_and_retried_after_a_500(system: System, start_worker: Any) -> None:
    secret = "s3cret"
    env = {**system.env, "JARVIS_WEBHOOK_SECRET": secret, "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1"}
    receiver = Receiver(secret)
    try:
        start_worker(env)
        agent, _ = system.service.create(system.user_id, CreateRequest(goal="hook", webhook_url=receiver.url))
        done = system.terminal(agent.id)
        assert done.status is AgentStatus.COMPLETED
        system.wait_until(lambda: len(receiver.deliveries) >= 2, 20, "the retried delivery")
        (t1, s1, v1, _), (t2, s2, v2, b2) = receiver.deliveries[:2]
        assert (s1, s2) == (500, 200) and v1 and v2
        assert t2 - t1 < 10  # the first retry comes within 10 s
        assert b2["id"] == str(agent.id) and b2["status"] == "COMPLETED"
        assert b2["final_answer"] == "1113068"
        time.sleep(1)
        assert len(receiver.deliveries) == 2  # delivered: no more tries
        again = system.repository.get(agent.id)
        assert again is not None and again.status is AgentStatus.COMPLETED  # delivery never changes it
    finally:
        receiver.close()


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://169.254.169.254/latest",
                                 "http://[::1]/x", "http://localhost/x"])
def test_private_webhook_addresses_are_refused_by_default(url: str, tmp_path: Path) -> None:
    from jarvis_agents.config import Settings

    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_WEBHOOK_SECRET": "s"})
    with pytest.raises(RequestError, match="non-public address"):
        check_webhook_url(url, settings)
    allowed = settings.with_overrides(webhook_allow_private=True)
    check_webhook_url(url, allowed)


def test_webhook_without_a_secret_is_refused(tmp_path: Path) -> None:
    from jarvis_agents.config import Settings

    with pytest.raises(RequestError, match="JARVIS_WEBHOOK_SECRET"):
        check_webhook_url("https://example.com/hook", Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}))
