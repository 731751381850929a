"""The worker's publishes: at once when alone, in order, sharing round trips under load."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from jarvis_agents.events import AGENT_CHANNEL, USER_CHANNEL, RedisEventBus, decode
from jarvis_agents.events.tokens import TOKEN_LISTENERS
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType


class Connection:
    """A redis-py connection as the sender uses it: PUBLISHes written, replies read later."""

    def __init__(self, client: FakeRedis) -> None:
        self.client = client
        self.replies = 0

    def pack_commands(self, commands: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
        # A PUBLISH as (channel, payload); a token's publish-if-listened script as
        # (channel, payload) too, its listener key recorded in `scripted`.
        packed = []
        for command in commands:
            if command[0] == "EVAL":
                _, _, keys, key, channel, payload = command
                assert keys == 1
                self.client.scripted.append(key)
                packed.append((channel, payload))
            else:
                assert command[0] == "PUBLISH"
                packed.append((command[1], command[2]))
        return packed

    def send_packed_command(self, packed: list[tuple[str, str]], check_health: bool) -> None:
        assert check_health is False  # a PING would read the PUBLISHes' replies
        self.client.gate.wait(5)
        if self.client.failure is not None:
            raise self.client.failure
        self.client.sent.append(packed)
        self.client.thread_names.add(threading.current_thread().name)
        self.replies += len(packed)
        self.client.after_send()

    def read_response(self) -> int:
        assert self.replies > 0, "read a reply that was never asked for"
        self.replies -= 1
        return 1

    def can_read(self, timeout: float) -> bool:
        return self.replies > 0

    def disconnect(self) -> None:
        self.replies = 0


class Pool:
    def __init__(self, client: FakeRedis) -> None:
        self.client = client

    def get_connection(self) -> Connection:
        self.client.connections += 1
        return Connection(self.client)

    def release(self, connection: Connection) -> None:
        pass


class FakeRedis:
    def __init__(self) -> None:
        self.sent: list[list[tuple[str, str]]] = []  # one list per write
        self.scripted: list[str] = []  # listener keys of the tokens sent
        self.thread_names: set[str] = set()
        self.failure: Exception | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.connections = 0
        self.connection_pool = Pool(self)

    def after_send(self) -> None:
        pass


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

    def refill() -> None:
        seq = next(more, None)
        if seq is not None:  # another agent publishes during every write
            bus.publish_steps(a, steps(seq))

    client.after_send = refill  # type: ignore[method-assign]
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
    assert client.connections == 2  # the failed one was dropped


def test_one_connection_carries_every_batch_its_replies_read_before_the_next() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a = agent()
    for seq in range(1, 6):
        bus.publish_steps(a, steps(seq))
    assert bus.flush(5)
    assert len(client.sent) == 5 and client.connections == 1
    connection = bus._sender._connection  # type: ignore[union-attr]
    assert connection.replies == 1  # only the last batch's reply is still unread


def test_nothing_to_publish_starts_no_thread() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    bus.publish_steps(agent(), [])
    assert bus.flush(0.1)
    assert client.sent == []


def test_a_replys_last_tokens_leave_before_its_steps_in_the_same_write() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a = agent()
    bus.listener_heard(a.id)  # an API process announced a listener of its tokens
    with bus.reply_tokens(a.id, 0) as on_delta:
        on_delta("THOUGHT: ")
        on_delta("sums")
    bus.publish_steps(a, steps(1))
    assert bus.flush(5)
    channel = AGENT_CHANNEL.format(a.id)
    assert len(client.sent) == 1  # one write, not one for the tokens and one for the step
    assert kinds(client) == [(channel, "token", None), (channel, "step", 1)]
    assert json.loads(client.sent[0][0][1])["data"]["delta"] == "THOUGHT: sums"
    assert client.scripted == [TOKEN_LISTENERS.format(a.id)]  # Redis checks who listens


def test_tokens_of_a_reply_whose_steps_never_came_are_dropped() -> None:
    client = FakeRedis()
    bus = RedisEventBus(client)
    a, b = agent(), agent()
    bus.listener_heard(a.id)
    with bus.reply_tokens(a.id, 0) as on_delta:
        on_delta("a reply of a superseded attempt")
    bus.publish_steps(b, steps(1))  # the thread's next agent
    assert bus.flush(5)
    assert kinds(client) == [(AGENT_CHANNEL.format(b.id), "step", 1)]
