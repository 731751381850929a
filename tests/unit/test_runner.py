"""The runner with in-memory fakes: cancellations and shutdowns wake a waiting model call."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, StepTimeout
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus
from jarvis_agents.llm.base import ChatMessage, StopSignal
from jarvis_agents.runner import AgentRunner
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.registry import ToolRegistry


class RunnerStore(MemoryStore):
    """The MemoryStore plus the few repository calls the runner makes."""

    def __init__(self) -> None:
        super().__init__()
        self.released: list[tuple[uuid.UUID, int]] = []

    def claim(self, agent_id: uuid.UUID, *, task_id: str | None = None) -> Agent | None:
        agent = self.get(agent_id)
        if agent is None or agent.status is not AgentStatus.PENDING:
            return None
        return self.add(agent.with_running(attempt=agent.attempt + 1))

    def release(self, agent_id: uuid.UUID, attempt: int) -> bool:
        self.released.append((agent_id, attempt))
        return True

    def heartbeat(self, owned: Sequence[tuple[uuid.UUID, int]]) -> None:
        pass


class WaitingModel:
    """A model that never answers and waits on a StopSignal as the Ollama adapter does."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.looks = 0

    def chat(self, messages: Sequence[ChatMessage], *, model: str, stop: Sequence[str],
             deadline: float, should_stop: Callable[[], bool]) -> str:
        assert isinstance(should_stop, StopSignal)
        woken = threading.Event()
        with should_stop.waking(woken.set):
            self.waiting.set()
            while True:
                self.looks += 1
                if should_stop():
                    raise Cancelled("cancelled")
                if time.monotonic() >= deadline:
                    raise StepTimeout("too slow")
                poll_s = should_stop.poll_s if should_stop.poll_s is not None else 3600.0
                woken.wait(min(deadline - time.monotonic(), poll_s))
                woken.clear()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})


@pytest.fixture
def parts(settings: Settings) -> Iterator[tuple[AgentRunner, RunnerStore, WaitingModel]]:
    store, model = RunnerStore(), WaitingModel()
    tools = ToolRegistry([], settings=settings)
    executor = Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=30, total_timeout_s=60))
    runner = AgentRunner(repository=store, executor=executor, events=MemoryEventBus(),  # type: ignore[arg-type]
                         dispatcher=None, settings=settings)  # type: ignore[arg-type]
    yield runner, store, model
    tools.close()


def start_in_thread(runner: AgentRunner, store: RunnerStore, model: WaitingModel,
                    **kwargs: Any) -> tuple[Agent, threading.Thread]:
    agent = store.add(Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3))
    thread = threading.Thread(target=runner.run, args=(agent.id,), kwargs=kwargs, daemon=True)
    thread.start()
    assert model.waiting.wait(2)
    return agent, thread


def test_a_task_for_a_missing_or_ended_agent_is_a_no_op(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], caplog: pytest.LogCaptureFixture
) -> None:
    runner, store, model = parts
    missing = uuid.uuid4()
    runner.run(missing)
    assert f"agent {missing} does not exist" in caplog.text
    ended = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    ended = store.add(ended.with_running(attempt=1).with_completed("done"))
    runner.run(ended.id)
    assert store.get(ended.id) == ended and not model.waiting.is_set()


def test_cancel_local_wakes_the_waiting_model_call(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel],
) -> None:
    runner, store, model = parts
    agent, thread = start_in_thread(runner, store, model)
    assert runner.active() == 1
    time.sleep(0.3)
    assert model.looks == 1  # no polling faster than the revoke fallback (1 s)
    began = time.monotonic()
    runner.cancel_local(agent.id)
    thread.join(1)
    assert not thread.is_alive() and time.monotonic() - began < 0.1
    assert runner.active() == 0 and store.released == []


def test_a_shutdown_past_its_grace_wakes_and_hands_back_the_agent(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel],
) -> None:
    runner, store, model = parts
    agent, thread = start_in_thread(runner, store, model)
    runner.begin_shutdown(0.1)
    thread.join(1)
    assert not thread.is_alive()
    assert store.released == [(agent.id, 1)]


def test_a_revoke_is_noticed_by_polling(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvis_agents import runner as runner_module

    monkeypatch.setattr(runner_module, "REVOKE_POLL_S", 0.05)
    runner, store, _ = parts
    revoked = threading.Event()
    agent = store.add(Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3))
    thread = threading.Thread(target=runner.run, args=(agent.id,),
                              kwargs={"is_revoked": revoked.is_set}, daemon=True)
    thread.start()
    time.sleep(0.1)
    revoked.set()
    thread.join(1)
    assert not thread.is_alive()
