"""Following an agent on the in-memory bus and store: subscribe first, replay after the
caller's position, relay live steps once each, repair a lost publish from the store,
end with the final status — and, as the API's streams rely on, never tell a step twice."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from jarvis_agents.errors import NotFound
from jarvis_agents.events import (
    IDLE,
    Ended,
    Follower,
    MemoryEventBus,
    Message,
    StepEvent,
    Waiting,
    follow,
    step_event,
)
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason
from jarvis_agents.store.memory import MemoryStore

USER = uuid.uuid4()


class Run:
    """An agent that a test moves along: each step stored, then published (or not)."""

    def __init__(self, store: MemoryStore, bus: MemoryEventBus) -> None:
        self.store = store
        self.bus = bus
        self.agent = store.add(
            Agent.new(user_id=USER, goal="g", model="m", max_steps=5).with_running(attempt=1))
        self.seq = 0

    def step(self, *, published: bool = True) -> Step:
        self.seq += 1
        kind = (StepType.THINK, StepType.ACT, StepType.OBSERVE)[(self.seq - 1) % 3]
        step = Step(seq=self.seq, step=(self.seq - 1) // 3, type=kind, content=f"#{self.seq}")
        self.store.append_steps(self.agent.id, 1, [step], step_count=step.step + 1)
        if not published:
            self.bus.drop()
        self.bus.publish_steps(self.agent, [step])
        return step

    def end(self, *, cancelled: bool = False, published: bool = True) -> None:
        running = self.store.get(self.agent.id)
        assert running is not None
        ended = running.with_cancelled() if cancelled else running.with_completed("42")
        self.store.add(ended)
        if not published:
            self.bus.drop(2)  # the agent's channel and the user's
        self.bus.publish_status(ended)


@pytest.fixture
def bus() -> MemoryEventBus:
    return MemoryEventBus()


@pytest.fixture
def run(bus: MemoryEventBus) -> Run:
    return Run(MemoryStore(), bus)


def following(run: Run, *, after: int = 0) -> Follower:
    return follow(run.bus, run.store, run.agent.id, after=after, user_id=USER, tick_s=0.01,
                  poll_s=0.05)


def next_told(told: Iterator[object], deadline_s: float = 2.0) -> object:
    """The next thing told that is not IDLE, within a deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        item = next(told)
        if item is not IDLE:
            return item
    raise AssertionError("nothing was told before the deadline")


def seqs(told: Iterator[object], count: int) -> list[int]:
    out = []
    for _ in range(count):
        item = next_told(told)
        assert isinstance(item, StepEvent), item
        out.append(item.seq)
    return out


def test_replays_after_the_position_then_relays_live_then_ends(run: Run) -> None:
    for _ in range(3):
        run.step()
    follower = following(run, after=1)
    told = iter(follower)
    assert seqs(told, 2) == [2, 3]  # the replay, from the store
    assert next(told) is IDLE  # nothing new: a tick for the caller's hang-up check
    step = run.step()
    live = next_told(told)
    assert isinstance(live, StepEvent) and live.message is not None  # as published
    assert (live.seq, live.name, live.data) == (4, "think", step_event(run.agent.id, step))
    run.end()
    ended = next_told(told)
    assert ended == Ended(run.agent.id, AgentStatus.COMPLETED, StopReason.FINAL_ANSWER)
    assert follower.finished
    assert list(told) == []
    assert run.bus.subscriber_count() == 0  # left the channel when it ended


class ReadCounter:
    """The store as a follower sees it, its reads counted."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.reads: list[str] = []

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None:
        self.reads.append("get")
        return self.store.get(agent_id, user_id=user_id)

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]:
        self.reads.append("steps_after")
        return self.store.steps_after(agent_id, seq)

    def agent_with_steps(self, agent_id: uuid.UUID, *, after: int = 0,
                         user_id: uuid.UUID | None = None) -> tuple[Agent | None, list[Step]]:
        self.reads.append("agent_with_steps")
        return self.store.agent_with_steps(agent_id, after=after, user_id=user_id)


def test_it_reads_the_agent_with_its_steps_once_as_it_joins_and_once_as_it_ends(run: Run) -> None:
    """One read each time (one statement on a database), and the agent it read last is
    kept: a blocking A2A call answers with it instead of reading it again."""
    run.step()
    store = ReadCounter(run.store)
    follower = follow(run.bus, store, run.agent.id, user_id=USER, tick_s=0.01)
    assert store.reads == ["agent_with_steps"]
    told = iter(follower)
    assert seqs(told, 1) == [1]
    run.step()
    assert seqs(told, 1) == [2]
    run.end()
    assert next_told(told) == Ended(run.agent.id, AgentStatus.COMPLETED, StopReason.FINAL_ANSWER)
    assert store.reads == ["agent_with_steps", "agent_with_steps"]
    assert follower.agent == run.store.get(run.agent.id)  # as it ended


class WaitsAsItIsRead(ReadCounter):
    """The agent starts to wait on `call_id` between the follower's subscribe and its read:
    the WAITING publish is heard, and the read sees WAITING too."""

    def __init__(self, run: Run, call_id: str) -> None:
        super().__init__(run.store)
        self.run, self.call_id = run, call_id

    def agent_with_steps(self, agent_id: uuid.UUID, *, after: int = 0,
                         user_id: uuid.UUID | None = None) -> tuple[Agent | None, list[Step]]:
        if not self.reads:
            waiting = self.run.agent.with_waiting(call_id=self.call_id, tool="calculate",
                                                  tool_input="2*3")
            self.store.add(waiting)
            self.run.bus.publish_status(waiting)
        return super().agent_with_steps(agent_id, after=after, user_id=user_id)


def test_a_wait_heard_and_read_as_it_joins_is_told_once_and_the_next_wait_again(run: Run) -> None:
    """A client asks a person once per wait (`run` in a terminal): told twice, it would ask
    again for a call already answered, and wait for an answer that never comes."""
    store = WaitsAsItIsRead(run, "c1")
    told = iter(follow(run.bus, store, run.agent.id, user_id=USER, tick_s=0.01, poll_s=60))
    first = next_told(told)
    assert isinstance(first, Waiting) and first.data["call_id"] == "c1"
    heard = [next(told) for _ in range(5)]  # the WAITING publish, then ticks
    assert store.reads == ["agent_with_steps", "agent_with_steps"]  # the publish was read
    assert heard == [IDLE] * 5

    answered = run.store.get(run.agent.id).with_answered(  # type: ignore[union-attr]
        approve=True, tool_input=None, reason=None)
    # A later wait, even on a call with the same id (a model may reuse ids), is a new one.
    later = answered.updated_at + timedelta(seconds=1)  # type: ignore[operator]
    again = answered.with_running(attempt=2, now=later).with_waiting(
        call_id="c1", tool="calculate", tool_input="6*7", now=later)
    run.store.add(again)
    run.bus.publish_status(again)
    second = next_told(told)
    assert isinstance(second, Waiting) and second.data["input"] == "6*7"


def test_a_replayed_step_that_is_also_published_is_told_once(run: Run) -> None:
    follower = following(run)  # subscribed: what is published from here on is heard
    told = iter(follower)
    run.step()  # stored and published after the subscription, before the first read
    run.step()
    assert seqs(told, 2) == [1, 2]
    run.end()
    assert isinstance(next_told(told), Ended)


def test_a_lost_step_publish_is_repaired_from_the_store(run: Run) -> None:
    told = iter(following(run))
    run.step()
    assert seqs(told, 1) == [1]
    run.step(published=False)  # the bus lost it
    run.step()  # seq 3 shows the gap: 2 and 3 are read from the store, in order
    assert seqs(told, 2) == [2, 3]


def test_a_lost_terminal_status_is_found_after_a_resync(run: Run) -> None:
    told = iter(following(run))
    run.step()
    assert seqs(told, 1) == [1]
    run.step(published=False)
    run.end(cancelled=True, published=False)
    run.bus.resync()  # the bus may have lost messages: the store has everything
    assert seqs(told, 1) == [2]
    ended = next_told(told)
    assert isinstance(ended, Ended) and ended.cancelled
    assert ended.summary() == {"agent_id": str(run.agent.id), "status": "CANCELLED",
                               "stop_reason": "cancelled"}


def test_a_wait_whose_publish_was_lost_is_told_after_a_resync_and_only_once(run: Run) -> None:
    told = iter(following(run))
    assert next(told) is IDLE
    waiting = run.agent.with_waiting(call_id="c1", tool="calculate", tool_input="2*3")
    run.store.add(waiting)
    run.bus.drop(2)  # the agent's channel and the user's
    run.bus.publish_status(waiting)
    run.bus.resync()
    first = next_told(told)
    assert isinstance(first, Waiting) and first.data["call_id"] == "c1"
    run.bus.resync()  # read again, still waiting: nothing new to tell
    assert [next(told) for _ in range(5)] == [IDLE] * 5


def test_without_live_messages_it_polls_the_store(run: Run) -> None:
    told = iter(following(run))
    run.bus.connected = False  # e.g. the hub has lost Redis
    run.step(published=False)
    run.end(published=False)
    assert seqs(told, 1) == [1]
    assert isinstance(next_told(told), Ended)


def test_joining_an_ended_agent_replays_then_ends_at_once(run: Run) -> None:
    run.step()
    run.step()
    run.end(cancelled=True)
    told = list(following(run, after=1))
    assert [t.seq for t in told if isinstance(t, StepEvent)] == [2]
    assert isinstance(told[-1], Ended) and told[-1].cancelled
    assert IDLE not in told


def test_someone_elses_agent_is_not_found_and_leaves_no_subscription(run: Run) -> None:
    with pytest.raises(NotFound, match="no agent with id"):
        follow(run.bus, run.store, run.agent.id, user_id=uuid.uuid4())
    with pytest.raises(NotFound):
        follow(run.bus, run.store, uuid.uuid4())
    assert run.bus.subscriber_count() == 0


def test_a_closing_bus_ends_the_iteration_without_an_end(run: Run) -> None:
    follower = following(run)
    told = iter(follower)
    assert next(told) is IDLE
    run.bus.close()
    assert list(told) == []
    assert not follower.finished  # the agent goes on; a client resumes from its last seq
    assert run.bus.subscriber_count() == 0


class Writer:
    """A lent writer that takes the next step in sequence, as the API's SocketWriter does."""

    def __init__(self) -> None:
        self.last_seq = 0
        self.wrote: list[int] = []

    def __call__(self, message: Message) -> bool:
        event = StepEvent.of_message(message)
        if message.kind != "step" or event is None or event.seq != self.last_seq + 1:
            return False
        self.last_seq = event.seq
        self.wrote.append(event.seq)
        return True


def test_steps_a_lent_writer_takes_are_not_told_again(run: Run) -> None:
    writer = Writer()
    run.step()
    follower = follow(run.bus, run.store, run.agent.id, tick_s=1.0, writer=lambda: writer)
    told = iter(follower)
    assert seqs(told, 1) == [1]  # the replay is told; the writer is asked for after it
    threading.Timer(0.1, run.step).start()  # while the follower waits: the writer takes it
    deadline = time.monotonic() + 5
    while follower.last_seq < 2:  # learnt from the writer when its wait ends
        assert next(told) is IDLE and time.monotonic() < deadline
    assert writer.wrote == [2]
    run.end()  # a status is never the writer's: it wakes the follower, which ends
    assert isinstance(next_told(told), Ended)
