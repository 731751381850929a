"""The event hub on a real Redis: it hears only the channels its streams watch, and a
lost connection comes back subscribed to them, with a RESYNC for every stream."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis as redis_lib

from jarvis_agents.events import (
    AGENT_CHANNEL,
    RESYNC,
    USER_CHANNEL,
    EventHub,
    Message,
    Subscription,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def client(redis_url: str) -> Iterator[redis_lib.Redis]:
    # Named, so that a test can find the hub's own connection among the server's.
    client = redis_lib.Redis.from_url(redis_url, client_name=f"hub-{uuid.uuid4().hex[:8]}")
    yield client
    client.close()


@pytest.fixture
def hub(client: redis_lib.Redis) -> Iterator[EventHub]:
    hub = EventHub(client)
    yield hub
    hub.close()


def listeners(client: redis_lib.Redis, channel: str) -> int:
    return dict(client.pubsub_numsub(channel)).get(channel.encode(), 0)


def eventually(condition: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def publish_step(client: redis_lib.Redis, channel: str, seq: int) -> None:
    client.publish(channel, json.dumps({"kind": "step", "data": {"seq": seq}}))


def next_message(subscription: Subscription, timeout_s: float = 5.0) -> Message:
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        item = subscription.get(remaining)
        if isinstance(item, Message):
            return item
    raise AssertionError("no message arrived")


def test_the_hub_hears_a_channel_only_while_a_stream_watches_it(
    client: redis_lib.Redis, hub: EventHub
) -> None:
    watched, other = AGENT_CHANNEL.format(uuid.uuid4()), USER_CHANNEL.format(uuid.uuid4())
    first = hub.subscribe(watched)
    assert hub.connected
    # Joined when subscribe returns: what is published from now on arrives.
    assert (listeners(client, watched), listeners(client, other)) == (1, 0)
    publish_step(client, watched, 1)
    assert next_message(first).data == {"seq": 1}

    second = hub.subscribe(watched)  # the same connection, no second subscription
    assert listeners(client, watched) == 1
    publish_step(client, watched, 2)
    assert next_message(first).data == next_message(second).data == {"seq": 2}

    first.close()
    assert listeners(client, watched) == 1  # `second` still watches it
    second.close()
    eventually(lambda: listeners(client, watched) == 0, "the hub to leave the channel")

    third = hub.subscribe(watched)  # and back again
    assert listeners(client, watched) == 1
    publish_step(client, watched, 3)
    assert next_message(third).data == {"seq": 3}
    third.close()


def test_a_lost_connection_comes_back_subscribed_and_streams_resync(
    client: redis_lib.Redis, hub: EventHub
) -> None:
    channel = AGENT_CHANNEL.format(uuid.uuid4())
    subscription = hub.subscribe(channel)
    assert subscription.get(1.0) is RESYNC  # the first connection's: nothing missed yet
    name = client.client_getname()
    (hub_connection,) = [
        c for c in client.client_list(_type="pubsub") if c.get("name") == name
    ]
    client.client_kill_filter(_id=hub_connection["id"])

    deadline = time.monotonic() + 10
    while subscription.get(max(0.0, deadline - time.monotonic())) is not RESYNC:
        assert time.monotonic() < deadline, "no RESYNC after the connection was lost"
    eventually(lambda: listeners(client, channel) == 1, "the channel to be subscribed again")
    publish_step(client, channel, 4)
    assert next_message(subscription).data == {"seq": 4}
    subscription.close()
