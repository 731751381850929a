"""Create's enqueue: after the commit, PENDING published and the task queued in one Redis
round trip, and an unreachable broker leaves the agent to the sweeper, never lost."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.events import (
    AGENT_CHANNEL,
    USER_CHANNEL,
    MemoryEventBus,
    QueuePush,
    RedisEventBus,
)
from jarvis_agents.lifecycle import Agent
from jarvis_agents.routing import queue_for
from jarvis_agents.service import AgentService, CreateRequest
from workers.celery_app import QUEUE, RUN_AGENT, CeleryDispatcher, create_celery


class Repository:
    """Records what the service did to the store, in order, in `log` (shared)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.forgotten: list[uuid.UUID] = []

    def create_agent(self, agent: Agent, *, max_active: int | None = None) -> tuple[Agent, bool]:
        self.log.append("commit")
        return agent, True

    def forget_task(self, agent_id: uuid.UUID) -> None:
        self.forgotten.append(agent_id)


class Dispatcher:
    def __init__(self, log: list[str], *, pushes: bool, failure: Exception | None = None) -> None:
        self.log = log
        self.pushes = pushes
        self.failure = failure
        self.enqueued: list[tuple[uuid.UUID, str]] = []
        self.queues: list[str] = []  # the queue of each push or enqueue

    def queue_push(self, agent_id: uuid.UUID, *, task_id: str, queue: str = QUEUE) -> QueuePush | None:
        self.queues.append(queue)
        return QueuePush(queue, json.dumps({"task_id": task_id})) if self.pushes else None

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str = QUEUE) -> None:
        self.log.append("enqueue")
        self.queues.append(queue)
        if self.failure is not None:
            raise self.failure
        self.enqueued.append((agent_id, task_id))


class Pipeline:
    def __init__(self, client: FakeRedis) -> None:
        self.client = client
        self.commands: list[tuple[Any, ...]] = []

    def publish(self, channel: str, payload: str) -> None:
        self.commands.append(("PUBLISH", channel, payload))

    def lpush(self, key: str, payload: str) -> None:
        self.commands.append(("LPUSH", key, payload))

    def execute(self) -> list[int]:
        self.client.log.append("round trip")
        if self.client.failure is not None:
            raise self.client.failure
        self.client.sent.append(self.commands)
        return [1] * len(self.commands)


class FakeRedis:
    def __init__(self, log: list[str], failure: Exception | None = None) -> None:
        self.log = log
        self.failure = failure
        self.sent: list[list[tuple[Any, ...]]] = []  # one list of commands per round trip

    def pipeline(self, transaction: bool = True) -> Pipeline:
        assert transaction is False
        return Pipeline(self)


def service(repository: Any, dispatcher: Any, events: Any) -> AgentService:
    return AgentService(repository=repository, settings=Settings.from_env({}),
                        dispatcher=dispatcher, events=events, tool_names=["calculate"])


def test_the_task_rides_in_the_round_trip_of_the_pending_publish() -> None:
    log: list[str] = []
    client = FakeRedis(log)
    dispatcher = Dispatcher(log, pushes=True)
    agent, created = service(Repository(log), dispatcher, RedisEventBus(client)).create(
        uuid.uuid4(), CreateRequest(goal="What is 2 + 2?"))
    assert created
    assert log == ["commit", "round trip"]  # queued only after the commit, in one trip
    (commands,) = client.sent
    assert [c[:2] for c in commands] == [
        ("PUBLISH", AGENT_CHANNEL.format(agent.id)),
        ("PUBLISH", USER_CHANNEL.format(agent.user_id)),
        ("LPUSH", queue_for("llama3.2")),  # after PENDING, so no RUNNING can overtake it
    ]
    assert json.loads(commands[0][2])["data"]["status"] == "PENDING"
    assert json.loads(commands[2][2]) == {"task_id": str(agent.id)}
    assert dispatcher.enqueued == []


def test_without_a_ready_message_it_publishes_then_enqueues() -> None:
    log: list[str] = []
    events = MemoryEventBus()
    dispatcher = Dispatcher(log, pushes=False)
    agent, _ = service(Repository(log), dispatcher, events).create(
        uuid.uuid4(), CreateRequest(goal="What is 2 + 2?"))
    assert log == ["commit", "enqueue"]
    assert dispatcher.enqueued == [(agent.id, str(agent.id))]
    assert dispatcher.queues == ["jarvis-agents@llama3.2"] * 2  # the model's queue (routing)
    assert [m.data["status"] for m in events.messages] == ["PENDING", "PENDING"]
    assert events.pushes == []


@pytest.mark.parametrize("failure", [redis.ConnectionError("Connection refused"),
                                     redis.TimeoutError("Timeout reading from socket")])
def test_an_unreachable_broker_leaves_the_agent_to_the_sweeper(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    repository = Repository(log)
    client = FakeRedis(log, failure=failure)
    agent, created = service(repository, Dispatcher(log, pushes=True), RedisEventBus(client)).create(
        uuid.uuid4(), CreateRequest(goal="What is 2 + 2?"))
    assert created and agent.status.value == "PENDING"  # still a 202 with the agent
    assert repository.forgotten == [agent.id]  # task_id cleared: the sweeper enqueues it
    assert "stays queued for the sweeper" in caplog.text


def test_a_failed_enqueue_after_the_publish_also_goes_to_the_sweeper() -> None:
    log: list[str] = []
    repository = Repository(log)
    dispatcher = Dispatcher(log, pushes=False,
                            failure=DependencyUnavailable("the task queue (Redis) is unreachable"))
    agent, _ = service(repository, dispatcher, MemoryEventBus()).create(
        uuid.uuid4(), CreateRequest(goal="What is 2 + 2?"))
    assert repository.forgotten == [agent.id]


def test_a_failed_publish_without_a_push_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    client = FakeRedis([], failure=redis.ConnectionError("refused"))
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    with caplog.at_level(logging.WARNING, logger="jarvis_agents.events"):
        RedisEventBus(client).publish_status(agent)  # best effort: no exception
    assert f"could not publish events of agent {agent.id}" in caplog.text


def test_a_failed_push_raises_dependency_unavailable() -> None:
    client = FakeRedis([], failure=redis.ConnectionError("refused"))
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    with pytest.raises(DependencyUnavailable, match="task queue"):
        RedisEventBus(client).publish_status(agent, push=QueuePush(QUEUE, "{}"))


# --- the message itself (pinned against send_task and a real worker in
# tests/integration/test_direct_enqueue.py) ----------------------------------------------


@pytest.fixture
def dispatcher(tmp_path: Path) -> CeleryDispatcher:
    settings = Settings.from_env({"REDIS_URL": "redis://127.0.0.1:1/0",
                                  "JARVIS_DATA_DIR": str(tmp_path)})
    return CeleryDispatcher(create_celery(settings))


def test_the_message_is_a_celery_protocol_2_task_in_kombus_redis_envelope(
    dispatcher: CeleryDispatcher,
) -> None:
    agent_id = uuid.uuid4()
    push = dispatcher.queue_push(agent_id, task_id=f"{agent_id}:2")
    assert push is not None and push.key == QUEUE  # priority 0: the list without suffix
    message = json.loads(push.payload)
    assert message["content-type"] == "application/json"
    assert message["content-encoding"] == "utf-8"
    headers, properties = message["headers"], message["properties"]
    assert headers["task"] == RUN_AGENT
    assert headers["id"] == headers["root_id"] == f"{agent_id}:2"
    assert properties["correlation_id"] == f"{agent_id}:2"
    assert properties["body_encoding"] == "base64"
    assert properties["delivery_info"] == {"exchange": "", "routing_key": QUEUE}
    assert properties["priority"] == 0
    assert properties["delivery_mode"] == 2
    args, kwargs, embed = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([str(agent_id)], {})
    assert embed == {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    # Every message has its own delivery tag: the key of its entry in the unacked hash.
    again = json.loads(dispatcher.queue_push(agent_id, task_id=f"{agent_id}:2").payload)
    assert again["properties"]["delivery_tag"] != properties["delivery_tag"]


def test_no_ready_message_for_a_prefixed_broker(tmp_path: Path) -> None:
    settings = Settings.from_env({"REDIS_URL": "redis://127.0.0.1:1/0",
                                  "JARVIS_DATA_DIR": str(tmp_path)})
    app = create_celery(settings)
    app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                         "global_keyprefix": "jarvis:"}
    assert CeleryDispatcher(app).queue_push(uuid.uuid4(), task_id="t") is None
