"""Fault-injection helpers: a system of real processes the tests can hurt."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.events import RedisEventBus
from jarvis_agents.lifecycle import Agent
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store import open_repository
from jarvis_agents.store.repository import Repository

CALC = [
    "THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902",
    "THOUGHT: Check it once more\nACTION: calculate\nINPUT: 1113068 / 902",
    "THOUGHT: done\nFINAL_ANSWER: 1113068",
]


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class System:
    env: dict[str, str]
    settings: Settings
    repository: Repository
    service: AgentService
    user_id: uuid.UUID

    def create(self, goal: str = "What is 1234 * 902?") -> Agent:
        agent, _ = self.service.create(self.user_id, CreateRequest(goal=goal))
        return agent

    def wait_until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        wait_until(check, timeout_s, what)

    def terminal(self, agent_id: uuid.UUID, timeout_s: float = 30) -> Agent:
        self.wait_until(lambda: self.repository.get(agent_id).is_terminal, timeout_s,  # type: ignore[union-attr]
                        f"agent {agent_id} to end")
        return self.repository.get(agent_id)  # type: ignore[return-value]


@contextmanager
def running_system(env: dict[str, str]) -> Iterator[System]:
    """The API side of a system (service, repository) on `env`'s database and Redis."""
    from jarvis_agents.components import redis_client
    from workers.celery_app import CeleryDispatcher, create_celery

    settings = Settings.from_env(env)
    repository = open_repository(settings)
    redis = redis_client(settings)
    app = create_celery(settings)
    service = AgentService(
        repository=repository, settings=settings, dispatcher=CeleryDispatcher(app),
        events=RedisEventBus(redis), tool_names=["calculate", "getTime", "getWeather", "search"],
    )
    try:
        user, _ = repository.users.create(f"faults-{uuid.uuid4().hex[:6]}")
        yield System(env, settings, repository, service, user.id)
    finally:
        redis.close()
        repository.engine.dispose()
        app.close()


def system_env(database_url: str, redis_url: str, ollama_url: str) -> dict[str, str]:
    """A worker's environment with heartbeats fast enough for a test to watch."""
    return {
        "DATABASE_URL": database_url, "REDIS_URL": redis_url, "OLLAMA_HOST": ollama_url,
        "JARVIS_MODEL": "test-model", "JARVIS_HEARTBEAT_INTERVAL": "0.5",
        "JARVIS_HEARTBEAT_STALE": "3", "JARVIS_MODEL_RETRIES": "3",
        "JARVIS_MAX_ACTIVE_PER_USER": "1000", "JARVIS_PENDING_REQUEUE": "5",
    }


@pytest.fixture
def system(pg_url: str, redis_url: str, fake_ollama: Any) -> Iterator[System]:
    fake_ollama.responder = fake_ollama.by_turn(CALC)
    with running_system(system_env(pg_url, redis_url, fake_ollama.url)) as built:
        yield built
