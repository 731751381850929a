"""The worker's publishes: at once when alone, in order, sharing round trips under load."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from jarvis_agents.events import AGENT_CHANNEL, USER_CHANNEL, RedisEventBus, decode
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType


class Pipeline:
    def __init__(self, client: FakeRedis) -> None:
        self.client = client
        self.commands: list[tuple[str, str]] = []

    def publish(self, channel: str, payload: str) -> None:
        self.commands.append((channel, payload))

    def execute(self) -> list[int]:
        self.client.gate.wait(5)
        if self.client.failure is not None:
            raise self.client.failure
        self.client.sent.append(self.commands)
        self.client.thread_names.add(threading.current_thread().name)
        return [1] * len(self.commands)


class FakeRedis:
    def __init__(self) -> None:
        self.sent: list[list[tuple[str, str]]] = []  # one list per round trip
        self.thread_names: set[str] = set()
        self.failure: Exception | None = None
        self.gate = threading.Event()
        self.gate.set()

    def pipeline(self, transaction: bool = True) -> Pipeline:
        assert transaction is False
        return Pipeline(self)


def agent(status: AgentStatus = AgentStatus.RUNNING) -> Agent:
    return Agent(id=uuid.uuid4(), user_id=uuid.uuid4(), goal="g", model="m", max_steps=5,
                 status=status)


def steps(*seqs: int) -> list[Step]:
    return [Step(seq, 0, StepType.THINK, f"thought {seq}") for seq in seqs]


def kinds(client: FakeRedis) -> list[tuple[str, str, Any]]:
    out = []
    for batch in client.sent:
        for channel, payload in batch:
            message = decode(channel, payload)
            assert message is not None
            out.append((channel, message.kind, message.data.get("seq", message.data.get("status"))))
    return out


def test_steps_then_status_leave_in_order_on_the_callers_thread() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a = agent()
    bus.publish_steps(a, steps(1, 2))
    bus.publish_steps(a, steps(3), status=True)
    assert len(client.sent) == 2  # sent before publish_steps returned
    channel, user = AGENT_CHANNEL.format(a.id), USER_CHANNEL.format(a.user_id)
    assert kinds(client) == [
        (channel, "step", 1), (channel, "step", 2), (channel, "step", 3),
        (channel, "status", "RUNNING"), (user, "status", "RUNNING"),
    ]
    assert client.thread_names == {threading.current_thread().name}


def test_events_queued_while_a_round_trip_is_out_share_the_next_one() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a, b = agent(), agent()
    client.gate.clear()  # the first round trip hangs
    first = threading.Thread(target=bus.publish_steps, args=(a, steps(1)))
    first.start()
    while not bus._sender or not bus._sender._busy:
        threading.Event().wait(0.001)
    for seq in range(2, 12):
        bus.publish_steps(a if seq % 2 else b, steps(seq))  # queued: return at once
    assert client.sent == []
    client.gate.set()
    first.join(5)
    assert bus.flush(5)
    assert [len(batch) for batch in client.sent] == [1, 10]
    seqs = [json.loads(p)["data"]["seq"] for batch in client.sent for _, p in batch]
    assert seqs == list(range(1, 12))


def test_a_publisher_hands_a_long_backlog_to_the_sender_thread() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a = agent()
    more = iter(range(2, 6))

    class Refilling(Pipeline):
        def execute(self) -> list[int]:
            result = super().execute()
            seq = next(more, None)
            if seq is not None:  # another agent publishes during every round trip
                bus.publish_steps(a, steps(seq))
            return result

    client.pipeline = lambda transaction=True: Refilling(client)  # type: ignore[method-assign]
    bus.publish_steps(a, steps(1))
    assert bus.flush(5)
    seqs = [json.loads(p)["data"]["seq"] for batch in client.sent for _, p in batch]
    assert seqs == [1, 2, 3, 4, 5]
    assert "jarvis-event-sender" in client.thread_names
    assert threading.current_thread().name in client.thread_names


def test_a_failed_publish_is_dropped_and_the_next_goes_out() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a = agent()
    client.failure = ConnectionError("down")
    bus.publish_steps(a, steps(1))  # never raises
    assert bus.flush(5)
    client.failure = None
    bus.publish_steps(a, steps(2))
    assert bus.flush(5)
    assert [seq for _, _, seq in kinds(client)] == [2]


def test_nothing_to_publish_starts_no_thread() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    bus.publish_steps(agent(), [])
    assert bus.flush(0.1)
    assert client.sent == []
