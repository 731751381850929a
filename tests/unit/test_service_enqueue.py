"""Create's enqueue: after the commit, PENDING published, then the task queued by the
dispatcher alone; an unreachable broker leaves the agent to the sweeper, never lost."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from jarvis_agents.config import Settings
from jarvis_agents.dispatch import MemoryDispatcher, Queued
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.events import MemoryEventBus, RedisEventBus
from jarvis_agents.lifecycle import Agent
from jarvis_agents.routing import queue_for
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store.memory import MemoryStore
from workers.celery_app import CeleryDispatcher, create_celery


class Repository(MemoryStore):
    """The MemoryStore, noting each create's commit in `log` (shared) and each forgotten task."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log
        self.forgotten: list[uuid.UUID] = []

    def create_agent(self, agent: Agent, *, max_active: int | None = None) -> tuple[Agent, bool]:
        created = super().create_agent(agent, max_active=max_active)
        self.log.append("commit")
        return created

    def forget_task(self, agent_id: uuid.UUID) -> None:
        self.forgotten.append(agent_id)
        super().forget_task(agent_id)


class Dispatcher(MemoryDispatcher):
    """Notes in `log` what had been published when the enqueue came."""

    def __init__(self, log: list[str], events: MemoryEventBus, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log = log
        self.events = events

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str | None = None) -> None:
        published = [m.data["status"] for m in self.events.messages]
        self.log.append(f"enqueue after {published}")
        super().enqueue(agent_id, task_id=task_id, queue=queue)


def service(repository: Any, dispatcher: Any, events: Any) -> AgentService:
    return AgentService(repository=repository, settings=Settings.from_env({}),
                        dispatcher=dispatcher, events=events, tool_names=["calculate"])


def test_pending_is_published_after_the_commit_and_before_the_enqueue() -> None:
    log: list[str] = []
    events = MemoryEventBus()
    dispatcher = Dispatcher(log, events)
    agent, created = service(Repository(log), dispatcher, events).create(
        uuid.uuid4(), CreateRequest(goal="What is 2 + 2?"))
    assert created
    # On the agent's channel and its user's; then queued, so no RUNNING can overtake it.
    assert log == ["commit", "enqueue after ['PENDING', 'PENDING']"]
    assert dispatcher.queued == [Queued(agent.id, str(agent.id), queue_for(agent.model))]


def test_an_unreachable_broker_leaves_the_agent_to_the_sweeper(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failure = DependencyUnavailable("the task queue (Redis) is unreachable: Connection refused")
    log: list[str] = []
    repository = Repository(log)
    events = MemoryEventBus()
    agent, created = service(repository, Dispatcher(log, events, failure=failure), events).create(
        uuid.uuid4(), CreateRequest(goal="What is 2 + 2?"))
    assert created and agent.status.value == "PENDING"  # still a 202 with the agent
    assert repository.forgotten == [agent.id]  # task_id cleared: the sweeper enqueues it
    stored = repository.get(agent.id)
    assert stored is not None and stored.task_id is None
    assert "stays queued for the sweeper" in caplog.text


class FailingPipeline:
    def publish(self, channel: str, payload: str) -> None:
        pass

    def execute(self) -> list[int]:
        raise redis.ConnectionError("refused")


class DownRedis:
    def pipeline(self, transaction: bool = True) -> FailingPipeline:
        return FailingPipeline()


def test_a_failed_publish_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    with caplog.at_level(logging.WARNING, logger="jarvis_agents.events"):
        RedisEventBus(DownRedis()).publish_status(agent)  # best effort: no exception
    assert f"could not publish events of agent {agent.id}" in caplog.text


def test_the_celery_dispatcher_says_an_unreachable_broker_in_one_sentence(tmp_path: Path) -> None:
    settings = Settings.from_env({"REDIS_URL": "redis://127.0.0.1:1/0",
                                  "JARVIS_DATA_DIR": str(tmp_path)})
    app = create_celery(settings)
    try:
        with pytest.raises(DependencyUnavailable, match=r"the task queue \(Redis\) is unreachable"):
            CeleryDispatcher(app).enqueue(uuid.uuid4(), task_id="t")
    finally:
        app.close()
