"""Token listeners as the workers learn of them (events.tokens), on a real Redis: an API
process announces each one on the control channel when it registers and at every refresh
while its streams are open; a worker's bus publishes the tokens of the agents it heard
announced, and of no other, whatever Redis holds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from jarvis_agents.events import AGENT_CHANNEL, CONTROL_CHANNEL, TOKEN_LISTENERS, RedisEventBus
from jarvis_agents.events.tokens import TokenListeners
from jarvis_agents.lifecycle import Agent, Step, StepType

pytestmark = pytest.mark.integration


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def messages(pubsub: redis.client.PubSub, *, until: int, within_s: float = 5.0) -> list[dict]:
    """The messages published on the pubsub's channels, until `until` came or the deadline."""
    got: list[dict] = []
    deadline = time.monotonic() + within_s
    while len(got) < until and time.monotonic() < deadline:
        raw = pubsub.get_message(timeout=0.1)
        if raw is not None and raw["type"] == "message":
            got.append(json.loads(raw["data"]))
    return got


def test_a_listener_is_announced_when_it_registers_and_again_at_each_refresh(client) -> None:
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CONTROL_CHANNEL)
    listeners = TokenListeners(client, refresh_s=0.1)
    agent_id = uuid.uuid4()
    try:
        registration = listeners.listen(agent_id)
        told = messages(pubsub, until=3)
        # The registration's, then the refreshes': a worker that starts later hears one.
        assert told == [{"kind": "tokens", "data": {"agent_id": str(agent_id)}}] * 3
        assert client.exists(TOKEN_LISTENERS.format(agent_id))
        registration.close()
        assert not client.exists(TOKEN_LISTENERS.format(agent_id))
    finally:
        listeners.close()
        pubsub.close()


@pytest.mark.parametrize("announced", [True, False])
def test_a_worker_publishes_the_tokens_of_the_agents_it_heard_announced(client, announced) -> None:
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(AGENT_CHANNEL.format(agent.id))
    # A registered listener either way: what differs is whether this worker heard of it.
    client.hset(TOKEN_LISTENERS.format(agent.id), "api", "1")
    bus = RedisEventBus(client)
    try:
        if announced:
            bus.listener_heard(agent.id)
        with bus.reply_tokens(agent.id, 0) as on_delta:
            on_delta("THOUGHT: the ")
            on_delta("answer")
        bus.publish_steps(agent, [Step(1, 0, StepType.THINK, "the answer")])
        assert bus.flush(5)
        told = messages(pubsub, until=2 if announced else 1)
        tokens = [m["data"]["delta"] for m in told if m["kind"] == "token"]
        assert [m["kind"] for m in told][-1] == "step"  # the tokens, if any, before it
        assert tokens == (["THOUGHT: the answer"] if announced else [])
    finally:
        pubsub.close()
