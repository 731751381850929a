"""Live tokens on the in-memory bus (docs/api.md §6): a reply's text as the model writes it,
batched, published only while somebody listens, before that iteration's steps, and
told by `follow` only to a follower that asked for tokens."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.events import (
    Ended,
    MemoryEventBus,
    StepEvent,
    TokenBatcher,
    TokenEvent,
    follow,
)
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent
from jarvis_agents.llm.scripted import ScriptedChatModel
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry

SCRIPT = ["THOUGHT: add them.\nACTION: calculate\nINPUT: 2+2",
          "THOUGHT: done.\nFINAL_ANSWER: the sum is 4"]


@pytest.fixture
def tools(tmp_path: Path):  # type: ignore[no-untyped-def]
    registry = ToolRegistry([CalculateTool()], settings=Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}))
    yield registry
    registry.close()


def start(store: MemoryStore) -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal="add", model="m", max_steps=5)
    return store.add(agent.with_running(attempt=1))


def run(store: MemoryStore, bus: MemoryEventBus, tools: ToolRegistry, agent: Agent) -> None:
    executor = Executor(store=store, model=ScriptedChatModel(SCRIPT), tools=tools, events=bus,
                        limits=Limits(step_timeout_s=5, total_timeout_s=30))
    executor.run(agent)


def test_nobody_listening_publishes_no_token(tools: ToolRegistry) -> None:
    store, bus = MemoryStore(), MemoryEventBus()
    agent = start(store)
    run(store, bus, tools, agent)
    assert [m.kind for m in bus.messages if m.kind == "token"] == []
    assert any(m.kind == "step" for m in bus.messages)


def test_a_listener_gets_each_reply_as_written_before_its_steps(tools: ToolRegistry) -> None:
    store, bus = MemoryStore(), MemoryEventBus()
    agent = start(store)
    listening = bus.listen_tokens(agent.id)
    run(store, bus, tools, agent)
    listening.close()
    kinds = [(m.kind, m.data.get("step")) for m in bus.messages if m.kind in {"token", "step"}]
    # Every token of an iteration comes before that iteration's first step event.
    for step in (0, 1):
        first_step = kinds.index(("step", step))
        tokens = [i for i, k in enumerate(kinds) if k == ("token", step)]
        assert tokens and max(tokens) < first_step
    for step, reply in enumerate(SCRIPT):
        text = "".join(m.data["delta"] for m in bus.messages
                       if m.kind == "token" and m.data["step"] == step)
        assert text == reply
        assert all(m.data["agent_id"] == str(agent.id) for m in bus.messages if m.kind == "token")


def test_follow_tells_tokens_only_to_a_follower_that_asked(tools: ToolRegistry) -> None:
    store, bus = MemoryStore(), MemoryEventBus()
    agent = start(store)
    told: dict[bool, list[object]] = {True: [], False: []}

    def read(tokens: bool, ready: threading.Event) -> None:
        with follow(bus, store, agent.id, tick_s=0.05, tokens=tokens) as follower:
            ready.set()
            for item in follower:
                if isinstance(item, StepEvent | TokenEvent | Ended):
                    told[tokens].append(item)

    readers = []
    for tokens in (True, False):
        ready = threading.Event()
        reader = threading.Thread(target=read, args=(tokens, ready))
        reader.start()
        assert ready.wait(5)
        readers.append(reader)
    assert bus.token_listeners[agent.id] == 1
    run(store, bus, tools, agent)
    for reader in readers:
        reader.join(10)
    assert not any(isinstance(item, TokenEvent) for item in told[False])
    with_tokens = told[True]
    assert "".join(i.data["delta"] for i in with_tokens if isinstance(i, TokenEvent)) == "".join(SCRIPT)
    assert [i.seq for i in with_tokens if isinstance(i, StepEvent)] == \
        [i.seq for i in told[False] if isinstance(i, StepEvent)]
    assert bus.token_listeners[agent.id] == 0  # the follower left when it ended


class Recorder:
    """The batcher's publish and `listening`: who listens is `heard` (everyone if None)."""

    def __init__(self, heard: set[uuid.UUID] | None = None) -> None:
        self.batches: list[tuple[uuid.UUID, int, str]] = []
        self.heard = heard
        self.published = threading.Event()

    def publish(self, batches: Sequence[tuple[uuid.UUID, int, str]]) -> None:
        self.batches.extend(batches)
        self.published.set()

    def listening(self, agent_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        return set(agent_ids) if self.heard is None else set(agent_ids) & self.heard


def test_batches_go_every_interval_or_once_full() -> None:
    agent_id = uuid.uuid4()
    recorder = Recorder()
    batcher = TokenBatcher(publish=recorder.publish, listening=recorder.listening,
                           interval_s=0.05, max_bytes=20)
    with batcher.reply(agent_id, 3) as on_delta:
        on_delta("Hello")
        assert recorder.published.wait(5)  # alone, the piece goes after the interval
        assert recorder.batches == [(agent_id, 3, "Hello")]

    # An interval no test sees the end of: a piece alone waits for it, a full batch not.
    recorder = Recorder()
    batcher = TokenBatcher(publish=recorder.publish, listening=recorder.listening,
                           interval_s=3600, max_bytes=20)
    with batcher.reply(agent_id, 3) as on_delta:
        on_delta("Hello")
        assert recorder.batches == []
        on_delta("x" * 25)  # full: at once
        assert recorder.published.wait(5)
        on_delta(" tail")  # sent as the reply ends
    assert "".join(text for _, _, text in recorder.batches) == "Hello" + "x" * 25 + " tail"


def test_a_reply_nobody_listens_to_publishes_nothing_and_wakes_no_thread() -> None:
    def senders() -> int:
        return sum(1 for thread in threading.enumerate() if thread.name == "jarvis-tokens")

    recorder = Recorder(heard=set())
    batcher = TokenBatcher(publish=recorder.publish, listening=recorder.listening,
                           interval_s=0.01, max_bytes=20)
    before = senders()
    with batcher.reply(uuid.uuid4(), 0) as on_delta:
        on_delta("Hello")
        on_delta("x" * 25)  # full, too: still nobody to send it to
    assert recorder.batches == []
    assert senders() == before  # no sender thread was started for it


def test_a_listener_heard_mid_reply_gets_the_reply_from_its_start() -> None:
    recorder = Recorder(heard=set())
    batcher = TokenBatcher(publish=recorder.publish, listening=recorder.listening,
                           interval_s=0.02, max_bytes=1000)
    agent_id = uuid.uuid4()
    with batcher.reply(agent_id, 2) as on_delta:
        on_delta("THOUGHT: ")
        on_delta("half")
        assert recorder.batches == []
        recorder.heard.add(agent_id)  # type: ignore[union-attr]
        batcher.wake(agent_id)  # the announcement reaches the worker
        assert recorder.published.wait(2)  # what was written so far goes out, unasked
        on_delta(" and the rest")
    assert "".join(text for _, _, text in recorder.batches) == "THOUGHT: half and the rest"
    assert {step for _, step, _ in recorder.batches} == {2}


def test_a_failed_reply_drops_what_it_holds() -> None:
    recorder = Recorder()
    batcher = TokenBatcher(publish=recorder.publish, listening=recorder.listening,
                           interval_s=10, max_bytes=1000)
    with pytest.raises(RuntimeError), batcher.reply(uuid.uuid4(), 0) as on_delta:
        on_delta("half a reply")
        raise RuntimeError("the stream dropped")
    assert recorder.batches == []
