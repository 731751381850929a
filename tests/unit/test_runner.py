"""The runner with in-memory fakes: cancellations and shutdowns wake a waiting model call
or tool, an agent's attempts are kept apart, and a lost worker is decided by its heartbeat."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, StepTimeout
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus, StopReason, utcnow
from jarvis_agents.llm.base import Capabilities, ChatReply, ChatRequest, OnDelta, StopSignal
from jarvis_agents.routing import queue_for
from jarvis_agents.runner import AgentRunner
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.registry import ToolRegistry
from tests.unit.test_tools_network import server  # noqa: F401 - a fixture


class RunnerStore(MemoryStore):
    """The MemoryStore, noting the hand-backs and heartbeats, and the dispatcher's enqueues."""

    def __init__(self) -> None:
        super().__init__()
        self.released: list[tuple[uuid.UUID, int]] = []
        self.enqueued: list[str] = []
        self.queues: list[str] = []
        self.beats: list[list[tuple[uuid.UUID, int]]] = []

    def release(self, agent_id: uuid.UUID, attempt: int) -> bool:
        self.released.append((agent_id, attempt))
        return super().release(agent_id, attempt)

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str = "") -> None:  # the dispatcher's
        self.enqueued.append(task_id)
        self.queues.append(queue)

    def heartbeat(self, owned: Iterable[tuple[uuid.UUID, int]]) -> int:
        pairs = sorted(owned)
        self.beats.append(pairs)
        return super().heartbeat(pairs)

    def set_heartbeat(self, agent_id: uuid.UUID, when: datetime | None) -> None:
        self.agents[agent_id] = replace(self.agents[agent_id], heartbeat_at=when)


class WaitingModel:
    """A model that never answers and waits on a StopSignal as the Ollama adapter does."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.looks = 0
        self.calls = 0

    def complete(self, request: ChatRequest, *, deadline: float,
                 should_stop: Callable[[], bool], on_delta: OnDelta | None = None) -> ChatReply:
        assert isinstance(should_stop, StopSignal)
        woken = threading.Event()
        with should_stop.waking(woken.set):
            self.calls += 1
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

    def capabilities(self, model: str, *, deadline: float,
                     should_stop: Callable[[], bool]) -> Capabilities:
        return Capabilities(tools=False)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})


@pytest.fixture
def parts(settings: Settings) -> Iterator[tuple[AgentRunner, RunnerStore, WaitingModel]]:
    store, model = RunnerStore(), WaitingModel()
    tools = ToolRegistry([], settings=settings)
    executor = Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=30, total_timeout_s=60))
    runner = AgentRunner(repository=store, store=store, executor=executor,  # type: ignore[arg-type]
                         events=MemoryEventBus(), dispatcher=store, settings=settings)  # type: ignore[arg-type]
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
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvis_agents import runner as runner_module

    # A revoke fallback the test never sees the end of: only the wake ends the call.
    monkeypatch.setattr(runner_module, "REVOKE_POLL_S", 3600.0)
    runner, store, model = parts
    agent, thread = start_in_thread(runner, store, model)
    assert runner.active() == 1
    runner.cancel_local(agent.id)
    thread.join(5)
    assert not thread.is_alive()
    assert model.looks == 2  # one look as it began, one as it was woken: no polling between
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
    assert store.enqueued == [f"{agent.id}:2"]  # queued again at once, not after a sweep
    assert store.queues == [queue_for(agent.model)]  # on its model's queue (routing)


def test_a_revoke_is_noticed_by_polling(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvis_agents import runner as runner_module

    monkeypatch.setattr(runner_module, "REVOKE_POLL_S", 0.05)
    runner, store, model = parts
    revoked = threading.Event()
    _, thread = start_in_thread(runner, store, model, is_revoked=revoked.is_set)
    revoked.set()  # nothing wakes the call: the poll notices it
    thread.join(5)
    assert not thread.is_alive()


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_superseded_attempt_ending_here_leaves_the_new_one_beating_and_cancellable(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A duplicate delivery takes the agent over on the worker still running the old
    attempt; the old attempt's end must not drop the new one's heartbeat or cancel."""
    from jarvis_agents import runner as runner_module

    monkeypatch.setattr(runner_module, "REVOKE_POLL_S", 0.02)
    runner, store, model = parts
    runner.settings = runner.settings.with_overrides(heartbeat_interval_s=0.02)
    old_revoked = threading.Event()
    agent, old = start_in_thread(runner, store, model, is_revoked=old_revoked.is_set)
    store.set_heartbeat(agent.id, utcnow() - timedelta(hours=1))  # as if it had stalled
    new = threading.Thread(target=runner.run, args=(agent.id,), daemon=True)
    new.start()
    wait_for(lambda: model.calls == 2, "the second attempt's model call")
    assert store.get(agent.id).attempt == 2  # type: ignore[union-attr]
    old_revoked.set()  # only the first attempt stops
    old.join(1)
    assert not old.is_alive() and runner.active() == 1
    runner.start_background(sweep=False)
    try:
        wait_for(lambda: store.beats and store.beats[-1] == [(agent.id, 2)], "a heartbeat")
        runner.cancel_local(agent.id)
        new.join(1)
        assert not new.is_alive()
    finally:
        runner.stop_background()


def test_a_claim_taken_back_and_made_again_leaves_the_new_run_beating_and_cancellable(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database crash took a claim back (it commits without waiting for the disk): the
    agent is claimed again, under the same attempt number, while the run the crash cut
    off still waits here. That run's end must not drop the new one's heartbeat or cancel."""
    from jarvis_agents import runner as runner_module

    monkeypatch.setattr(runner_module, "REVOKE_POLL_S", 0.02)
    runner, store, model = parts
    runner.settings = runner.settings.with_overrides(heartbeat_interval_s=0.02)
    old_revoked = threading.Event()
    agent, old = start_in_thread(runner, store, model, is_revoked=old_revoked.is_set)
    store.agents[agent.id] = agent  # PENDING under attempt 0 again: the crash kept the create
    new = threading.Thread(target=runner.run, args=(agent.id,), daemon=True)
    new.start()
    wait_for(lambda: model.calls == 2, "the second run's model call")
    assert store.get(agent.id).attempt == 1  # type: ignore[union-attr]
    old_revoked.set()  # only the run the crash cut off stops
    old.join(1)
    assert not old.is_alive() and runner.active() == 1
    runner.start_background(sweep=False)
    try:
        wait_for(lambda: store.beats and store.beats[-1] == [(agent.id, 1)], "a heartbeat")
        runner.cancel_local(agent.id)
        new.join(1)
        assert not new.is_alive()
    finally:
        runner.stop_background()


def test_worker_lost_needs_a_stale_heartbeat_and_a_hand_back_is_no_loss(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel],
) -> None:
    runner, store, _ = parts  # JARVIS_MAX_ATTEMPTS=3
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    agent = store.add(replace(agent.with_running(attempt=3), losses=2))
    runner.run(agent.id)  # a duplicate message while it beats: nothing happens
    assert store.get(agent.id) == agent
    store.set_heartbeat(agent.id, None)  # handed back: resumed, not failed
    resumed = threading.Thread(target=runner.run, args=(agent.id,), daemon=True)
    resumed.start()
    wait_for(lambda: store.get(agent.id).attempt == 4, "the take-over")  # type: ignore[union-attr]
    assert store.get(agent.id).losses == 2  # type: ignore[union-attr]
    runner.cancel_local(agent.id)
    resumed.join(1)
    store.set_heartbeat(agent.id, utcnow() - timedelta(hours=1))  # its third worker lost
    runner.run(agent.id)
    failed = store.get(agent.id)
    assert failed is not None and failed.status is AgentStatus.FAILED
    assert failed.stop_reason is StopReason.WORKER_LOST and failed.losses == 3
    assert "lost 3 times (the limit is 3)" in (failed.error or "")


def test_an_agent_reads_its_status_while_the_cancel_listener_is_deaf(
    parts: tuple[AgentRunner, RunnerStore, WaitingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvis_agents import runner as runner_module

    runner, _, _ = parts
    monkeypatch.setattr(runner_module, "STATUS_CHECK_S", 0.2)
    clock = Clock()
    monkeypatch.setattr(runner_module, "time", clock)  # the runner's clock, not the process's
    deaf = runner._status_checks()
    assert deaf() and deaf()  # never connected: every iteration
    runner._listener_connected(None)
    listening = runner._status_checks()
    assert not listening()  # connected, and just looked
    runner._listener_connected(None)  # redis-py reconnected: a cancel may have been missed
    assert listening() and not listening()
    clock.now += 0.25
    assert listening() and not listening()  # once per STATUS_CHECK_S without cancels
    runner._cancel_heard_at = clock.now
    clock.now += 0.25
    runner._cancel_heard_at = clock.now  # cancels flow: the listener works
    assert not listening()


class Clock:
    """A monotonic clock the test moves on by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_cancel_during_a_slow_http_tool_ends_the_attempt_at_once(
    settings: Settings, server: Any  # noqa: F811 - the fixture imported above
) -> None:
    from jarvis_agents.llm.scripted import ScriptedChatModel
    from jarvis_agents.tools.builtin.get_weather import GetWeatherTool
    from tests.unit.test_tools_network import Route

    server.routes["/v1/search"] = Route({"results": []}, delay_s=30)
    settings = settings.with_overrides(
        weather_geocoding_url=f"{server.url}/v1/search", tool_timeout_s=10.0)
    store = RunnerStore()
    model = ScriptedChatModel(["THOUGHT: look it up\nACTION: getWeather\nINPUT: London"])
    tools = ToolRegistry([GetWeatherTool()], settings=settings)
    executor = Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=30, total_timeout_s=60))
    runner = AgentRunner(repository=store, store=store, executor=executor,  # type: ignore[arg-type]
                         events=MemoryEventBus(), dispatcher=store, settings=settings)  # type: ignore[arg-type]
    agent = store.add(Agent.new(user_id=uuid.uuid4(), goal="weather?", model="m", max_steps=3))
    thread = threading.Thread(target=runner.run, args=(agent.id,), daemon=True)
    try:
        thread.start()
        wait_for(lambda: bool(server.requests), "the tool's request")
        store.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                         stop_reason=StopReason.CANCELLED)
        runner.cancel_local(agent.id)  # what the cancel listener does on the publish
        thread.join(1.0)  # not the tool's 10 s timeout
        assert not thread.is_alive()
        assert [s.type.value for s in store.steps_after(agent.id)] == ["THINK", "ACT"]
    finally:
        server.release.set()
        tools.close()


class FaultyStore(RunnerStore):
    """A store whose first step write raises `fault`: a bug of ours, or an outage."""

    def __init__(self, fault: Exception) -> None:
        super().__init__()
        self.fault: Exception | None = fault

    def append_steps(self, agent_id: uuid.UUID, attempt: int, steps: Any, *, step_count: int) -> None:
        fault, self.fault = self.fault, None
        if fault is not None:
            raise fault
        super().append_steps(agent_id, attempt, steps, step_count=step_count)


def faulty_runner(settings: Settings, fault: Exception) -> tuple[AgentRunner, FaultyStore, Agent]:
    from jarvis_agents.llm.scripted import ScriptedChatModel

    store = FaultyStore(fault)
    model = ScriptedChatModel(["THOUGHT: add\nACTION: echo\nINPUT: 2"])
    executor = Executor(store=store, model=model, tools=ToolRegistry([], settings=settings),
                        events=MemoryEventBus(), limits=Limits(step_timeout_s=30, total_timeout_s=60))
    runner = AgentRunner(repository=store, store=store, executor=executor,  # type: ignore[arg-type]
                         events=MemoryEventBus(), dispatcher=store, settings=settings)  # type: ignore[arg-type]
    agent = store.add(Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3))
    return runner, store, agent


def test_a_bug_inside_the_loop_fails_the_agent_at_once_naming_it(settings: Settings) -> None:
    runner, store, agent = faulty_runner(settings, KeyError("call_id"))
    runner.run(agent.id, task_id=str(agent.id))  # returns: nothing for Celery to log as lost
    failed = store.get(agent.id)
    assert failed is not None and failed.status is AgentStatus.FAILED
    assert failed.stop_reason is StopReason.INTERNAL_ERROR
    assert failed.error == "internal error: KeyError: 'call_id'"
    assert [s.type.value for s in store.steps_after(agent.id)] == ["ERROR"]
    # Not left RUNNING for a sweep to resume as a lost worker, three times over.
    assert (failed.attempt, failed.losses, store.enqueued) == (1, 0, [])


def test_an_outage_inside_the_loop_leaves_the_agent_to_be_resumed(settings: Settings) -> None:
    from sqlalchemy.exc import OperationalError

    outage = OperationalError("INSERT …", {}, Exception("server closed the connection"))
    runner, store, agent = faulty_runner(settings, outage)
    with pytest.raises(OperationalError):
        runner.run(agent.id, task_id=str(agent.id))
    running = store.get(agent.id)
    assert running is not None and running.status is AgentStatus.RUNNING  # for a take-over
