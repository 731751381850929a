"""The enqueue (`CeleryDispatcher.enqueue`, Celery's `send_task`) against the real thing:
a real Celery worker that runs it, and what is left in Redis when a worker ends: nothing
of an agent's message once a worker has it (the database recovers agents; kombu's
`ack_emulation` is off), and what a warm shutdown puts back.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_lib

from jarvis_agents.config import Settings
from jarvis_agents.events import RedisEventBus
from jarvis_agents.lifecycle import AgentStatus, utcnow
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store import open_repository
from tests.support.api_server import CALC_SCRIPT
from workers.celery_app import QUEUE, RUN_AGENT, CeleryDispatcher, create_celery

pytestmark = pytest.mark.integration

UNACKED = "unacked"  # kombu's Redis transport: delivery tag → [message, exchange, routing key]
UNACKED_INDEX = "unacked_index"  # … and delivery tag → when it was delivered


def test_enqueue_is_one_message_on_the_queue_or_the_one_it_is_given(
    redis_url: str, tmp_path: Any
) -> None:
    settings = Settings.from_env({"REDIS_URL": redis_url, "JARVIS_DATA_DIR": str(tmp_path)})
    app = create_celery(settings)
    client = redis_lib.Redis.from_url(redis_url)
    other = f"jarvis-agents-{uuid.uuid4().hex[:6]}"
    try:
        dispatcher = CeleryDispatcher(app)
        agent_id = uuid.uuid4()
        dispatcher.enqueue(agent_id, task_id=f"{agent_id}:2")
        (raw,) = client.lrange(QUEUE, 0, -1)
        message = json.loads(raw)
        assert message["headers"]["task"] == RUN_AGENT
        assert message["headers"]["id"] == f"{agent_id}:2"
        assert message["properties"]["delivery_info"]["routing_key"] == QUEUE

        dispatcher.enqueue(agent_id, task_id="t-other", queue=other)  # a queue of its own
        (raw,) = client.lrange(other, 0, -1)
        assert json.loads(raw)["headers"]["id"] == "t-other"
        assert client.llen(QUEUE) == 1
    finally:
        client.delete(QUEUE, other)
        client.close()
        app.close()


@dataclass
class Stack:
    env: dict[str, str]
    service: AgentService
    repository: Any
    redis: Any
    user_id: uuid.UUID

    def wait(self, agent_id: uuid.UUID, done: Any, timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            agent = self.repository.get(agent_id)
            if done(agent):
                return agent
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def stack(pg_url: str, redis_url: str, fake_ollama: Any) -> Iterator[Stack]:
    from jarvis_agents.components import redis_client

    env = {
        "DATABASE_URL": pg_url, "REDIS_URL": redis_url, "OLLAMA_HOST": fake_ollama.url,
        "JARVIS_MODEL": "test-model",
        # The sweeper must not be what queues these agents: the create does.
        "JARVIS_PENDING_REQUEUE": "600", "JARVIS_HEARTBEAT_STALE": "600",
    }
    settings = Settings.from_env(env)
    fake_ollama.responder = fake_ollama.by_turn(CALC_SCRIPT)
    repository = open_repository(settings)
    client = redis_client(settings)
    app = create_celery(settings)
    service = AgentService(repository=repository, settings=settings,
                           dispatcher=CeleryDispatcher(app), events=RedisEventBus(client),
                           tool_names=["calculate"])
    user, _ = repository.users.create(f"direct-{uuid.uuid4().hex[:6]}")
    yield Stack(env, service, repository, client, user.id)
    client.close()
    app.close()
    repository.engine.dispose()


def test_a_real_worker_runs_the_enqueued_agent_and_keeps_nothing_of_it_in_redis(
    stack: Stack, start_worker: Any, fake_ollama: Any
) -> None:
    fake_ollama.latency_s = 0.5
    start_worker(stack.env)
    agent, created = stack.service.create(stack.user_id, CreateRequest(goal="What is 1234 * 902?"))
    assert created and agent.task_id == str(agent.id)

    stack.wait(agent.id, lambda a: a.status is AgentStatus.RUNNING, 20, "RUNNING")
    # Taken off the queue, and not in kombu's unacked hash either: an agent run is
    # recovered by its row (no ack emulation), so Redis holds nothing of it.
    assert stack.redis.llen(QUEUE) == 0
    assert stack.redis.hlen(UNACKED) == 0 and stack.redis.zcard(UNACKED_INDEX) == 0

    done = stack.wait(agent.id, lambda a: a.is_terminal, 30, "the agent to end")
    assert done.status is AgentStatus.COMPLETED, done.error
    assert done.final_answer == "1113068"
    assert done.attempt == 1  # one delivery, no re-enqueue
    assert stack.redis.llen(QUEUE) == 0 and stack.redis.hlen(UNACKED) == 0


def test_a_dead_workers_agent_is_left_to_the_database_not_to_a_restore(
    stack: Stack, start_worker: Any, fake_ollama: Any
) -> None:
    fake_ollama.latency_s = 30.0  # it stays RUNNING until the worker is killed
    worker = start_worker(stack.env)
    agent, _ = stack.service.create(stack.user_id, CreateRequest(goal="What is 1234 * 902?"))
    stack.wait(agent.id, lambda a: a.status is AgentStatus.RUNNING, 20, "RUNNING")
    worker.signal(signal.SIGKILL)
    worker.proc.wait(10)
    # No message waits out kombu's visibility timeout (an hour) to be delivered again:
    # the row, RUNNING with a heartbeat going stale, is what the sweeper queues again
    # (tests/faults/test_worker_death.py runs that to the end).
    assert stack.redis.llen(QUEUE) == 0 and stack.redis.hlen(UNACKED) == 0
    assert stack.repository.get(agent.id).status is AgentStatus.RUNNING


def _consume(channel: Any, count: int) -> list[Any]:
    """`count` messages off the queue, unacknowledged, the way a worker receives them."""
    messages: list[Any] = []
    deadline = time.monotonic() + 5
    while len(messages) < count and time.monotonic() < deadline:
        message = channel.basic_get(QUEUE, no_ack=False)
        if message is not None:
            messages.append(message)
    assert len(messages) == count
    return messages


def test_messages_held_unacknowledged_are_put_back_by_a_warm_shutdown(
    redis_url: str, tmp_path: Any
) -> None:
    """An agent's message is kept in memory only while unacknowledged; a channel closed
    before its ack (a worker's warm shutdown) still puts it back on the queue."""
    from kombu import Connection

    settings = Settings.from_env({"REDIS_URL": redis_url, "JARVIS_DATA_DIR": str(tmp_path)})
    app = create_celery(settings)
    client = redis_lib.Redis.from_url(redis_url)
    try:
        dispatcher = CeleryDispatcher(app)
        sent = [uuid.uuid4() for _ in range(2)]
        for agent_id in sent:
            dispatcher.enqueue(agent_id, task_id=str(agent_id))
        options = app.conf.broker_transport_options
        with Connection(redis_url, transport_options=options) as conn:
            channel = conn.channel()
            received = _consume(channel, 2)
            # Nothing is booked in Redis while they are unacknowledged.
            assert client.hlen(UNACKED) == 0 and client.zcard(UNACKED_INDEX) == 0
            assert client.llen(QUEUE) == 0
            channel.close()  # what a worker's warm shutdown does with what it holds

        queued = [json.loads(raw) for raw in client.lrange(QUEUE, 0, -1)]
        assert {m["headers"]["id"] for m in queued} == {str(a) for a in sent} == {
            r.headers["id"] for r in received}

        with Connection(redis_url, transport_options=options) as conn:
            channel = conn.channel()
            for message in _consume(channel, 2):
                message.ack()
            channel.close()  # nothing left to put back
        assert client.llen(QUEUE) == 0 and client.hlen(UNACKED) == 0
    finally:
        client.delete(QUEUE, UNACKED, UNACKED_INDEX)
        client.close()
        app.close()


def test_with_redis_down_the_agent_is_kept_for_the_sweeper(pg_url: str, tmp_path: Any) -> None:
    from jarvis_agents.components import redis_client
    from tests.conftest import free_port

    settings = Settings.from_env({"DATABASE_URL": pg_url, "JARVIS_DATA_DIR": str(tmp_path),
                                  "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    repository = open_repository(settings)
    client = redis_client(settings)
    app = create_celery(settings)
    try:
        service = AgentService(repository=repository, settings=settings,
                               dispatcher=CeleryDispatcher(app), events=RedisEventBus(client),
                               tool_names=["calculate"])
        user, _ = repository.users.create("no-redis")
        # Answered (not held until Redis is back): the agent is kept in the database.
        agent, created = service.create(user.id, CreateRequest(goal="What is 2 + 2?"))
        assert created
        stored = repository.get(agent.id)
        assert stored is not None and stored.status is AgentStatus.PENDING
        assert stored.task_id is None  # what the sweeper looks for (requeue_pending)
        untouched_before = utcnow() - timedelta(hours=1)  # only what is not on the queue
        (claimed,) = repository.requeue_pending(untouched_before=untouched_before)
        assert claimed[0] == agent.id and claimed[1]  # queued under a task id of its own
        assert repository.requeue_pending(untouched_before=untouched_before) == []
    finally:
        client.close()
        app.close()
        repository.engine.dispose()


def test_the_sweep_sends_again_only_what_is_no_longer_queued(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker: twelve PENDING agents wait; sweep after sweep, the queue holds one
    message for each (it is what KEDA scales on), and a lost message is sent again."""
    import math

    from jarvis_agents.routing import QueueDirectory, queue_for
    from jarvis_agents.sweeper import Sweeper
    from workers import celery_app

    agents = [stack.service.create(stack.user_id, CreateRequest(goal=f"g{n}"))[0] for n in range(12)]
    queue = queue_for(agents[0].model)
    # Every PENDING agent is due for a look at every sweep.
    settings = Settings.from_env({**stack.env, "JARVIS_PENDING_REQUEUE": "0.001"})
    app = create_celery(settings)
    try:
        dispatcher = CeleryDispatcher(app, directory=QueueDirectory(stack.redis))
        sweeper = Sweeper(repository=stack.repository, dispatcher=dispatcher,
                          events=RedisEventBus(stack.redis), settings=settings,
                          last_outage=lambda: -math.inf)
        for _ in range(3):
            assert sweeper.sweep() == 0
            assert stack.redis.llen(queue) == len(agents)

        taken = json.loads(stack.redis.rpop(queue))["headers"]["id"]  # its worker died
        assert sweeper.sweep() == 1
        assert sorted(json.loads(m)["headers"]["id"] for m in stack.redis.lrange(queue, 0, -1)) \
            == sorted(str(a.id) for a in agents)
        assert taken in {json.loads(m)["headers"]["id"] for m in stack.redis.lrange(queue, 0, 0)}

        stack.redis.delete(queue)  # what a Redis restart does to it
        assert sweeper.sweep() == len(agents)
        assert stack.redis.llen(queue) == len(agents)

        # A queue too long to read through tells of no lost message: none is sent.
        monkeypatch.setattr(celery_app, "LOOK_DEPTH", 5)
        stack.redis.rpop(queue)
        assert sweeper.sweep() == 0
    finally:
        stack.redis.delete(queue)
        app.close()
