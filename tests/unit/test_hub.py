"""The event hub: subscriptions that wake at once, overflow into a RESYNC and never lose
CLOSED; and its status check — one read per interval for every watched agent, a
terminal status handed to that agent's subscriptions, stopped with the hub."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence

import pytest

from jarvis_agents.events import (
    AGENT_CHANNEL,
    CLOSED,
    RESYNC,
    USER_CHANNEL,
    EventHub,
    Message,
    Subscription,
)
from jarvis_agents.events.subscription import MAX_QUEUED, Signal
from tests.support.api_server import wait_until


class NoRedis:
    """A Redis that is down: the hub's reader retries in the background, streams poll."""

    def pubsub(self) -> NoRedis:
        return self

    def subscribe(self, *channels: str) -> None:
        raise ConnectionError("Redis is down")

    def close(self) -> None:
        pass


class Statuses:
    """The record as the status check reads it; remembers every read."""

    def __init__(self) -> None:
        self.ended: dict[uuid.UUID, str] = {}
        self.reads: list[list[uuid.UUID]] = []
        self.failure: Exception | None = None
        self.read = threading.Event()

    def __call__(self, agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        self.reads.append(list(agent_ids))
        self.read.set()
        if self.failure is not None:
            raise self.failure
        return {a: s for a, s in self.ended.items() if a in agent_ids}


@pytest.fixture
def hub() -> Iterator[EventHub]:
    hub = EventHub(NoRedis(), first_connect_wait_s=0, max_backoff_s=0.05)
    yield hub
    hub.close()


def next_message(subscription: Subscription, timeout_s: float) -> Message | None:
    """The next published (or checked) message, skipping quiet ticks and resyncs."""
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        item = subscription.get(remaining)
        if isinstance(item, Message):
            return item
        assert item is None or item is RESYNC
    return None


class Waiter:
    """A `subscription.get` on a thread of its own, with no deadline the test could reach,
    once it waits: the writer it lends (one that declines all, unless given) is lent
    only while it waits."""

    def __init__(self, subscription: Subscription, writer: Lent | None = None) -> None:
        if writer is None:
            writer = Lent()
            writer.declining = True
        self.got: list[Message | Signal | None] = []
        self.thread = threading.Thread(
            target=lambda: self.got.append(subscription.get(3600, writer=writer)), daemon=True)
        self.thread.start()
        wait_until(lambda: subscription.writer is writer, timeout_s=5)

    def result(self, *, timeout_s: float) -> Message | Signal | None:
        self.thread.join(timeout_s)
        assert self.got, "the get was not woken"
        return self.got[0]


def step(seq: int) -> Message:
    return Message(AGENT_CHANNEL.format("a"), "step", {"seq": seq})


def test_a_put_from_another_thread_wakes_a_waiting_get(hub: EventHub) -> None:
    subscription = hub.subscribe(AGENT_CHANNEL.format(uuid.uuid4()))
    assert subscription.get(0.05) is None  # the time passed quietly

    waiter = Waiter(subscription)
    subscription.put(step(1))
    assert waiter.result(timeout_s=5) == step(1)
    subscription.put(step(2))
    subscription.put(step(3))
    assert [subscription.get(0), subscription.get(0), subscription.get(0)] == [step(2), step(3), None]


def test_a_consumer_too_slow_gets_a_resync_and_closed_is_never_dropped(hub: EventHub) -> None:
    subscription = hub.subscribe(AGENT_CHANNEL.format(uuid.uuid4()))
    for seq in range(MAX_QUEUED + 5):
        subscription.put(step(seq))
    assert subscription.get(0) is RESYNC  # the backlog is dropped: read the record
    assert subscription.get(0) is None
    subscription.put(step(7))
    assert subscription.get(0) == step(7)

    for seq in range(MAX_QUEUED + 5):
        subscription.put(step(seq))
    subscription.put(CLOSED)
    assert subscription.get(0) is CLOSED
    assert subscription.get(0) is CLOSED  # for good


def test_closing_the_hub_wakes_every_waiting_subscription(hub: EventHub) -> None:
    subscriptions = [hub.subscribe(AGENT_CHANNEL.format(uuid.uuid4())) for _ in range(3)]
    waiters = [Waiter(s) for s in subscriptions]
    hub.close()
    assert [w.result(timeout_s=5) for w in waiters] == [CLOSED] * 3
    assert hub.subscribe(USER_CHANNEL.format(uuid.uuid4())).get(0) is CLOSED


def test_one_read_per_interval_covers_every_watched_agent(hub: EventHub) -> None:
    statuses = Statuses()
    agents = [uuid.uuid4() for _ in range(3)]
    # Ten streams on three agents, and a user stream the check has nothing to do with.
    subscriptions = [hub.subscribe(AGENT_CHANNEL.format(agents[i % 3])) for i in range(10)]
    subscriptions.append(hub.subscribe(USER_CHANNEL.format(uuid.uuid4())))
    for _ in subscriptions:
        hub.check_ended(statuses, every_s=0.1)  # each stream asks; one check runs

    wait_until(lambda: len(statuses.reads) >= 3, timeout_s=5)
    # One checker, each of whose reads covers every watched agent: not one per stream.
    assert sum(1 for t in threading.enumerate() if t.name == "jarvis-status-check") == 1
    for read in statuses.reads:
        assert sorted(read) == sorted(agents)


def test_a_terminal_status_found_reaches_only_that_agents_subscriptions(hub: EventHub) -> None:
    statuses = Statuses()
    ended, running = uuid.uuid4(), uuid.uuid4()
    hub.check_ended(statuses, every_s=0.05)
    watchers = [hub.subscribe(AGENT_CHANNEL.format(ended)) for _ in range(2)]
    other = hub.subscribe(AGENT_CHANNEL.format(running))

    statuses.ended[ended] = "COMPLETED"  # written to the record, never published
    for watcher in watchers:
        message = next_message(watcher, timeout_s=1.0)
        assert message == Message(
            AGENT_CHANNEL.format(ended), "status", {"agent_id": str(ended), "status": "COMPLETED"}
        )
    assert next_message(other, timeout_s=0.2) is None


def test_a_failed_read_is_tried_again_at_the_next_interval(hub: EventHub) -> None:
    statuses = Statuses()
    agent_id = uuid.uuid4()
    statuses.failure = ConnectionError("the database is restarting")
    statuses.ended[agent_id] = "CANCELLED"
    subscription = hub.subscribe(AGENT_CHANNEL.format(agent_id))
    hub.check_ended(statuses, every_s=0.05)
    assert statuses.read.wait(1.0)

    statuses.failure = None
    message = next_message(subscription, timeout_s=1.0)
    assert message is not None and message.data["status"] == "CANCELLED"


def test_the_check_starts_on_first_use_and_stops_with_the_hub() -> None:
    hub = EventHub(NoRedis(), first_connect_wait_s=0, max_backoff_s=0.05)
    statuses = Statuses()
    hub.subscribe(AGENT_CHANNEL.format(uuid.uuid4()))
    assert not any(t.name == "jarvis-status-check" for t in threading.enumerate())

    hub.check_ended(statuses, every_s=0.05)
    checkers = [t for t in threading.enumerate() if t.name == "jarvis-status-check"]
    assert len(checkers) == 1
    assert statuses.read.wait(1.0)

    hub.close()
    assert not checkers[0].is_alive()  # it reads no more
    hub.check_ended(statuses, every_s=0.05)  # a closed hub starts nothing again
    assert not any(t.name == "jarvis-status-check" for t in threading.enumerate())


class Lent:
    """A consumer's writer: takes the steps it is offered until told to decline."""

    def __init__(self) -> None:
        self.taken: list[Message] = []
        self.declining = False

    def __call__(self, message: Message) -> bool:
        if self.declining:
            return False
        self.taken.append(message)
        return True


def test_a_waiting_consumers_writer_takes_messages_without_waking_it(hub: EventHub) -> None:
    channel = AGENT_CHANNEL.format("a")
    subscription = hub.subscribe(channel)
    writer = Lent()
    waiter = Waiter(subscription, writer)
    hub._deliver(step(1))
    hub._deliver(step(2))
    assert writer.taken == [step(1), step(2)]
    assert subscription.writer is writer  # still lent: the consumer sleeps on, unwoken
    subscription.put(step(3))  # a put wakes it
    assert waiter.result(timeout_s=5) == step(3)
    assert subscription.writer is None  # lent only while the consumer waits


def test_what_the_writer_declines_wakes_the_consumer_and_later_messages_queue_behind_it(
    hub: EventHub,
) -> None:
    subscription = hub.subscribe(AGENT_CHANNEL.format("a"))
    writer = Lent()
    writer.declining = True

    def publish() -> None:
        hub._deliver(step(1))  # declined: queued, and the writer taken back
        writer.declining = False
        hub._deliver(step(2))  # so this one queues behind it instead of overtaking it

    waiter = Waiter(subscription, writer)
    publish()
    assert waiter.result(timeout_s=5) == step(1)
    assert subscription.get(0, writer=writer) == step(2)
    assert writer.taken == []


def test_no_writer_is_lent_while_messages_are_queued(hub: EventHub) -> None:
    subscription = hub.subscribe(AGENT_CHANNEL.format("a"))
    writer = Lent()
    hub._deliver(step(1))
    hub._deliver(step(2))
    assert subscription.get(0, writer=writer) == step(1)  # nothing waited: nothing lent
    hub._deliver(step(3))
    assert [subscription.get(0, writer=writer), subscription.get(0, writer=writer)] == [
        step(2), step(3)
    ]
    assert writer.taken == []
