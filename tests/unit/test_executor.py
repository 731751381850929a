"""The ReACT loop with a scripted model, fake tools and the in-memory store."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import ModelNotFound, ModelUnavailable, ToolError
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason
from jarvis_agents.llm.scripted import ScriptedChatModel, by_turn
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.builtin.calculate import CalculateTool as Calculate
from jarvis_agents.tools.registry import ToolRegistry


class FakeWeather:
    name = "getWeather"
    description = "Current weather for a city."
    input_hint = "a city name"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.keys: list[str | None] = []

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        self.calls.append(tool_input)
        self.keys.append(context.idempotency_key)
        table = {"London": "London: 12 °C, overcast", "Tokyo": "Tokyo: 18 °C, clear sky"}
        if tool_input not in table:
            raise ToolError(f"no weather for {tool_input!r}")
        return table[tool_input]


class OfflineEcho:
    """An offline tool (`blocking = False`): the registry runs it inline."""

    name = "echo"
    description = "Repeats its input."
    input_hint = "anything"
    blocking = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        self.calls.append(tool_input)
        return f"echo: {tool_input}"


class FakeTime:
    name = "getTime"
    description = "Current time in a city."
    input_hint = "a city name"

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        return {"London": "London: 09:00 GMT", "Tokyo": "Tokyo: 18:00 JST"}[tool_input]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_TOOL_TIMEOUT": "2"})


@pytest.fixture
def weather() -> FakeWeather:
    return FakeWeather()


@pytest.fixture
def tools(settings: Settings, weather: FakeWeather):  # type: ignore[no-untyped-def]
    registry = ToolRegistry([Calculate(), weather, FakeTime()], settings=settings)
    yield registry
    registry.close()


def start(store: MemoryStore, *, max_steps: int = 10, goal: str = "goal") -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal=goal, model="test-model", max_steps=max_steps)
    return store.add(agent.with_running(attempt=1))


def make_executor(store, model, tools, *, step_s: float = 5, total_s: float = 30, events=None):  # type: ignore[no-untyped-def]
    return Executor(store=store, model=model, tools=tools, events=events or MemoryEventBus(),
                    limits=Limits(step_timeout_s=step_s, total_timeout_s=total_s))


def kinds(steps: Sequence[Step]) -> list[tuple[int, str]]:
    return [(s.step, s.type.value) for s in steps]


WEATHER_SCRIPT = [
    "THOUGHT: I need London's weather first.\nACTION: getWeather\nINPUT: London",
    "THOUGHT: Now Tokyo.\nACTION: getWeather\nINPUT: Tokyo",
    "THOUGHT: Time in London.\nACTION: getTime\nINPUT: London",
    "THOUGHT: Time in Tokyo.\nACTION: getTime\nINPUT: Tokyo",
    (
        "THOUGHT: I have everything.\nFINAL_ANSWER: London is 12 °C and overcast at 09:00; "
        "Tokyo is 18 °C and clear at 18:00."
    ),
]


def test_multi_tool_weather_and_time(tools: ToolRegistry) -> None:
    store, events = MemoryStore(), MemoryEventBus()
    model = ScriptedChatModel(WEATHER_SCRIPT)
    agent = start(store, goal="What is the weather in London and Tokyo, and what time is it there?")
    done = make_executor(store, model, tools, events=events).run(agent)
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert done.final_answer is not None and "Tokyo is 18 °C" in done.final_answer
    assert done.step_count == 5 and done.stop_reason is StopReason.FINAL_ANSWER
    steps = store.steps_after(agent.id)
    assert [s.seq for s in steps] == list(range(1, 15))
    assert kinds(steps) == [
        *[(i, k) for i in range(4) for k in ("THINK", "ACT", "OBSERVE")],
        (4, "THINK"), (4, "FINAL"),
    ]
    assert steps[2].content == "London: 12 °C, overcast" and steps[2].tool == "getWeather"
    # The model saw every earlier step verbatim.
    last_prompt = "\n".join(m.content for m in model.calls[-1])
    assert "OBSERVATION: Tokyo: 18:00 JST" in last_prompt
    assert "ACTION: getWeather\nINPUT: Tokyo" in last_prompt
    published = [m.data["seq"] for m in events.messages if m.kind == "step"]
    assert published == list(range(1, 15))
    assert events.messages[-1].data["status"] == "COMPLETED"


def test_unknown_tool_is_an_observation_and_the_loop_goes_on(tools: ToolRegistry) -> None:
    store = MemoryStore()
    model = ScriptedChatModel([
        "THOUGHT: search\nACTION: webSearch\nINPUT: x",
        "THOUGHT: ok\nFINAL_ANSWER: fine",
    ])
    done = make_executor(store, model, tools).run(start(store))
    assert done is not None and done.status is AgentStatus.COMPLETED
    observe = store.steps_after(done.id)[2]
    assert observe.type is StepType.OBSERVE and "calculate" in observe.content
    assert "getWeather" in observe.content


def test_tool_failure_is_an_observation(tools: ToolRegistry) -> None:
    store = MemoryStore()
    model = ScriptedChatModel([
        "THOUGHT: t\nACTION: calculate\nINPUT: 1/0",
        "THOUGHT: t\nACTION: getWeather\nINPUT: Atlantis",
        "FINAL_ANSWER: cannot",
    ])
    done = make_executor(store, model, tools).run(start(store))
    assert done is not None and done.status is AgentStatus.COMPLETED
    observations = [s.content for s in store.steps_after(done.id) if s.type is StepType.OBSERVE]
    assert "zero" in observations[0].lower() and "Atlantis" in observations[1]


def test_max_steps_fails_the_agent(tools: ToolRegistry) -> None:
    store = MemoryStore()
    model = ScriptedChatModel(by_turn(["THOUGHT: again\nACTION: calculate\nINPUT: 1+1"] * 10))
    done = make_executor(store, model, tools).run(start(store, max_steps=3))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.MAX_STEPS and done.step_count == 3
    assert "step limit (3)" in (done.error or "")
    steps = store.steps_after(done.id)
    assert steps[-1].type is StepType.ERROR and model.call_count == 3


def test_step_timeout(tools: ToolRegistry) -> None:
    store = MemoryStore()
    # A reply an hour away: only the step timeout ends the wait within the test's time.
    model = ScriptedChatModel(["FINAL_ANSWER: late"], delay_s=3600)
    done = make_executor(store, model, tools, step_s=0.2).run(start(store))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.STEP_TIMEOUT and "step timeout" in (done.error or "")


def test_total_timeout_counts_from_the_first_start(tools: ToolRegistry) -> None:
    store = MemoryStore()
    agent = start(store)
    from datetime import timedelta

    agent = store.add(replace(agent, started_at=agent.started_at - timedelta(seconds=29.7)))
    model = ScriptedChatModel(by_turn(["THOUGHT: t\nACTION: calculate\nINPUT: 2*2"] * 10), delay_s=0.2)
    done = make_executor(store, model, tools, total_s=30).run(agent)
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.TOTAL_TIMEOUT


@pytest.mark.parametrize(
    ("error", "text"),
    [(ModelUnavailable("could not reach the Ollama server at http://x after 3 attempts"), "could not reach"),
     (ModelNotFound("nosuchmodel"), "nosuchmodel")],
)
def test_model_errors_fail_the_agent(tools: ToolRegistry, error: Exception, text: str) -> None:
    store = MemoryStore()
    done = make_executor(store, ScriptedChatModel([error]), tools).run(start(store))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.MODEL_ERROR and text in (done.error or "")


def test_cancellation_mid_reply_stops_quickly_and_writes_nothing(tools: ToolRegistry) -> None:
    store, events = MemoryStore(), MemoryEventBus()
    agent = start(store)
    # A reply an hour away: only the cancel ends the wait within the test's time.
    model = ScriptedChatModel(["THOUGHT: slow\nACTION: calculate\nINPUT: 1+1"], delay_s=3600)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    result = make_executor(store, model, tools, events=events).run(agent, should_stop=cancel.is_set)
    assert result is None
    assert store.steps_after(agent.id) == [] and events.messages == []


def test_a_cancelled_agent_writes_no_further_step(tools: ToolRegistry) -> None:
    """The store refuses the write once the agent is CANCELLED (another door cancelled it)."""
    store = MemoryStore()
    agent = start(store)
    gate = threading.Event()

    def reply(messages):  # type: ignore[no-untyped-def]
        store.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                         stop_reason=StopReason.CANCELLED)
        return "THOUGHT: t\nACTION: calculate\nINPUT: 1+1"

    result = make_executor(store, ScriptedChatModel(reply), tools).run(agent)
    assert result is None and not gate.is_set()
    assert store.steps_after(agent.id) == []
    assert store.get(agent.id).status is AgentStatus.CANCELLED  # type: ignore[union-attr]


def test_a_cancel_never_heard_stops_the_loop_before_its_next_model_call(tools: ToolRegistry) -> None:
    """Cancelled in the store after an iteration's last write, with no signal: the
    status read the caller asks for (`check_status`) saves the next model call."""
    store = MemoryStore()
    agent = start(store)

    class CancelAfterFirstIteration(MemoryEventBus):
        def publish_steps(self, agent: Agent, steps: Sequence[Step], *, status: bool = False) -> None:
            super().publish_steps(agent, steps, status=status)
            store.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                             stop_reason=StopReason.CANCELLED)

    model = ScriptedChatModel(["THOUGHT: a\nACTION: calculate\nINPUT: 1+1",
                               "THOUGHT: b\nACTION: calculate\nINPUT: 2+2"])
    executor = make_executor(store, model, tools, events=CancelAfterFirstIteration())
    assert executor.run(agent, check_status=lambda: True) is None
    assert model.call_count == 1
    assert [s.type.value for s in store.steps_after(agent.id)] == ["THINK", "ACT", "OBSERVE"]


class Crash(BaseException):
    """The worker process dies (a BaseException, so nothing in the loop catches it)."""


class CrashingStore(MemoryStore):
    """Dies at the n-th write, before or after it is committed."""

    def __init__(self, crash_at: int, *, after_commit: bool) -> None:
        super().__init__()
        self.crash_at, self.after_commit, self.writes = crash_at, after_commit, 0

    def _maybe_crash(self, commit) -> None:  # type: ignore[no-untyped-def]
        self.writes += 1
        if self.writes == self.crash_at and not self.after_commit:
            raise Crash
        commit()
        if self.writes == self.crash_at and self.after_commit:
            raise Crash

    def append_steps(self, agent_id, attempt, steps, *, step_count):  # type: ignore[no-untyped-def]
        self._maybe_crash(lambda: MemoryStore.append_steps(self, agent_id, attempt, steps, step_count=step_count))

    def transition(self, agent_id, expected, new, **fields):  # type: ignore[no-untyped-def]
        result = []
        self._maybe_crash(lambda: result.append(MemoryStore.transition(self, agent_id, expected, new, **fields)))
        return result[0]


# Writes of the script (getWeather blocks, so ACT and OBSERVE are separate writes):
# [THINK,ACT] [OBSERVE] [THINK,ACT] [OBSERVE] [THINK,FINAL]+COMPLETED
@pytest.mark.parametrize("crash_at", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("after_commit", [False, True], ids=["before-commit", "after-commit"])
def test_resume_after_a_crash_at_every_point(tools: ToolRegistry, weather: FakeWeather,
                                             crash_at: int, after_commit: bool) -> None:
    script = WEATHER_SCRIPT[:2] + WEATHER_SCRIPT[-1:]
    store = CrashingStore(crash_at, after_commit=after_commit)
    agent = start(store)
    with pytest.raises(Crash):
        make_executor(store, ScriptedChatModel(by_turn(script)), tools).run(agent)
    current = store.get(agent.id)
    assert current is not None
    if current.status is AgentStatus.RUNNING:
        resumed = store.add(replace(current, attempt=2))
        store.crash_at = 0
        done = make_executor(store, ScriptedChatModel(by_turn(script)), tools).run(resumed)
        assert done is not None
    final = store.get(agent.id)
    assert final is not None and final.status is AgentStatus.COMPLETED
    steps = store.steps_after(agent.id)
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1))
    assert kinds(steps) == [(0, "THINK"), (0, "ACT"), (0, "OBSERVE"),
                            (1, "THINK"), (1, "ACT"), (1, "OBSERVE"), (2, "THINK"), (2, "FINAL")]
    # A tool whose ACT was persisted but whose OBSERVE was not runs again; no other repeats.
    # Each call carries `<agent_id>:<call_id>`: a call run again, the key of its first run.
    expected_calls = ["London", "Tokyo"]
    expected_keys = [f"{agent.id}:{s.call_id}" for s in steps if s.type is StepType.ACT]
    if crash_at in (2, 4) and not after_commit:
        expected_calls.insert(crash_at // 2, expected_calls[crash_at // 2 - 1])
        expected_keys.insert(crash_at // 2, expected_keys[crash_at // 2 - 1])
    assert weather.calls == expected_calls
    assert weather.keys == expected_keys


class ReadCountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def steps_after(self, agent_id, seq=0):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().steps_after(agent_id, seq)


def test_a_fresh_agent_reads_no_steps_back_a_resumed_one_does(tools: ToolRegistry) -> None:
    store = ReadCountingStore()
    script = by_turn(WEATHER_SCRIPT[:1] + WEATHER_SCRIPT[-1:])
    agent = start(store)
    assert agent.step_count == 0
    model = ScriptedChatModel(script)
    executor = make_executor(store, model, tools)
    first = store.add(replace(agent, max_steps=1))  # stops after one iteration
    assert executor.run(first) is not None
    assert store.reads == 0
    again = start(store)
    store.append_steps(again.id, again.attempt, [Step(1, 0, StepType.THINK, "t"),
                       Step(2, 0, StepType.ACT, "London", tool="getWeather")], step_count=1)
    resumed = store.get(again.id)
    assert resumed is not None and resumed.step_count == 1
    done = make_executor(store, ScriptedChatModel(script), tools).run(resumed)
    assert store.reads == 1
    assert done is not None and done.status is AgentStatus.COMPLETED
    steps = store.steps_after(again.id)
    # The persisted ACT's tool ran (its OBSERVE is there), and the loop went on after it.
    assert kinds(steps)[:3] == [(0, "THINK"), (0, "ACT"), (0, "OBSERVE")]


ECHO_SCRIPT = [
    "THOUGHT: first\nACTION: echo\nINPUT: one",
    "THOUGHT: second\nACTION: echo\nINPUT: two",
    "THOUGHT: done\nFINAL_ANSWER: one two",
]


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[str]] = []

    def append_steps(self, agent_id, attempt, steps, *, step_count):  # type: ignore[no-untyped-def]
        self.writes.append([s.type.value for s in steps])
        super().append_steps(agent_id, attempt, steps, step_count=step_count)


def test_an_inline_tools_iteration_is_one_write(settings: Settings) -> None:
    echo = OfflineEcho()
    store, events = CountingStore(), MemoryEventBus()
    with ToolRegistry([echo, FakeWeather()], settings=settings) as registry:
        script = [ECHO_SCRIPT[0], WEATHER_SCRIPT[0], "THOUGHT: t\nACTION: nope\nINPUT: x",
                  ECHO_SCRIPT[-1]]
        done = make_executor(store, ScriptedChatModel(by_turn(script)), registry,
                             events=events).run(start(store))
    assert done is not None and done.status is AgentStatus.COMPLETED and done.step_count == 4
    assert store.writes == [
        ["THINK", "ACT", "OBSERVE"],  # echo: inline
        ["THINK", "ACT"], ["OBSERVE"],  # getWeather: blocking, so ACT is persisted first
        ["THINK", "ACT", "OBSERVE"],  # an unknown tool: nothing runs
    ]
    steps = store.steps_after(done.id)
    assert [s.seq for s in steps] == list(range(1, 12))
    assert steps[2].content == "echo: one" and steps[2].tool == "echo"
    assert [m.data["seq"] for m in events.messages if m.kind == "step"] == list(range(1, 12))


# Writes of the script: [THINK,ACT,OBSERVE] [THINK,ACT,OBSERVE] [THINK,FINAL]+COMPLETED
@pytest.mark.parametrize("crash_at", [1, 2, 3])
@pytest.mark.parametrize("after_commit", [False, True], ids=["before-commit", "after-commit"])
def test_resume_after_a_crash_with_inline_tools(settings: Settings, crash_at: int,
                                                after_commit: bool) -> None:
    echo = OfflineEcho()
    store = CrashingStore(crash_at, after_commit=after_commit)
    agent = start(store)
    with ToolRegistry([echo], settings=settings) as registry:
        with pytest.raises(Crash):
            make_executor(store, ScriptedChatModel(by_turn(ECHO_SCRIPT)), registry).run(agent)
        current = store.get(agent.id)
        assert current is not None
        if current.status is AgentStatus.RUNNING:
            store.crash_at = 0
            resumed = store.add(replace(current, attempt=2))
            assert make_executor(store, ScriptedChatModel(by_turn(ECHO_SCRIPT)), registry).run(resumed)
    final = store.get(agent.id)
    assert final is not None and final.status is AgentStatus.COMPLETED
    steps = store.steps_after(agent.id)
    assert [s.seq for s in steps] == list(range(1, 9))
    assert kinds(steps) == [(0, "THINK"), (0, "ACT"), (0, "OBSERVE"),
                            (1, "THINK"), (1, "ACT"), (1, "OBSERVE"), (2, "THINK"), (2, "FINAL")]
    assert [s.content for s in steps if s.type is StepType.OBSERVE] == ["echo: one", "echo: two"]
    # Nothing of an iteration is persisted before its tool ran, so only an iteration
    # lost with its write is planned and run again.
    expected_calls = ["one", "two"]
    if crash_at in (1, 2) and not after_commit:
        expected_calls.insert(crash_at, expected_calls[crash_at - 1])
    assert echo.calls == expected_calls


def test_executor_loads_neither_flask_nor_celery() -> None:
    import subprocess

    code = "import sys, jarvis_agents.executor, jarvis_agents.service, jarvis_agents.runner; " \
           "print(sorted(m for m in ('flask', 'celery') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
