"""Native tool calling, usage and structured answers in the loop: a scripted model, fake
tools and the in-memory store."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from jarvis_agents.config import Settings
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import (
    Agent,
    AgentMode,
    AgentStatus,
    IterationRows,
    StepType,
    StopReason,
    Usage,
)
from jarvis_agents.llm.base import ChatReply, ToolCall
from jarvis_agents.llm.base import Usage as CallUsage
from jarvis_agents.llm.scripted import ScriptedChatModel, by_turn
from jarvis_agents.metrics import PrometheusTimings
from jarvis_agents.native.strategy import NativeStrategy
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry


class SlowWeather:
    """A tool of a JSON-Schema input that blocks (the default): it runs on a thread."""

    name = "getWeather"
    description = "Current weather for a city."
    def __init__(self) -> None:
        self.input_schema = {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}
        self.calls: list[str] = []
        self.keys: list[str | None] = []

    def run(self, arguments: dict[str, str], *, context: ToolContext) -> str:
        self.calls.append(arguments["city"])
        self.keys.append(context.idempotency_key)
        return f"{arguments['city']}: sunny"


@pytest.fixture
def weather() -> SlowWeather:
    return SlowWeather()


@pytest.fixture
def tools(tmp_path: Path, weather: SlowWeather) -> Iterator[ToolRegistry]:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_TOOL_TIMEOUT": "2"})
    registry = ToolRegistry([CalculateTool(), weather], settings=settings)
    yield registry
    registry.close()


def start(store: MemoryStore, *, mode: AgentMode = AgentMode.AUTO, schema: dict | None = None,
          max_steps: int = 10) -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal="Weather in Paris and Tokyo?", model="m",
                      max_steps=max_steps, mode=mode, output_schema=schema)
    return store.add(agent.with_running(attempt=1))


def executor(store: MemoryStore, model: ScriptedChatModel, tools: ToolRegistry) -> Executor:
    return Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                    limits=Limits(step_timeout_s=5, total_timeout_s=30))


def call(name: str, arguments: str, id: str) -> ToolCall:
    return ToolCall.from_text(name, arguments, id=id)


TWO_CALLS = ChatReply("Let me look.", "m", reasoning="Two cities.", usage=CallUsage(30, 7),
                      tool_calls=(call("getWeather", '{"city": "Paris"}', "c1"),
                                  call("getWeather", '{"city": "Tokyo"}', "c2")))
DONE = ChatReply("Paris and Tokyo are sunny.", "m", usage=CallUsage(50, 9))


def test_auto_on_a_tool_capable_model_runs_native_with_pairs_and_usage(
    tools: ToolRegistry, weather: SlowWeather
) -> None:
    store = MemoryStore()
    model = ScriptedChatModel([TWO_CALLS, DONE], tools=True)
    done = executor(store, model, tools).run(start(store))
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert done.final_answer == "Paris and Tokyo are sunny." and done.mode is AgentMode.NATIVE
    assert done.usage == Usage(80, 16, 2)
    assert store.get(done.id).usage == Usage(80, 16, 2)  # type: ignore[union-attr]
    steps = store.steps_after(done.id)
    assert [(s.step, s.type.value, s.call_id) for s in steps] == [
        (0, "THINK", None), (0, "ACT", "c1"), (0, "ACT", "c2"), (0, "OBSERVE", "c1"),
        (0, "OBSERVE", "c2"), (1, "FINAL", None)]
    assert steps[0].content == "Two cities.\n\nLet me look." and steps[0].usage == Usage(30, 7, 1)
    assert steps[1].content == '{"city": "Paris"}' and steps[3].content == "Paris: sunny"
    assert sorted(weather.calls) == ["Paris", "Tokyo"]
    assert sorted(weather.keys) == [f"{done.id}:c1", f"{done.id}:c2"]  # <agent_id>:<call_id>
    assert steps[5].usage == Usage(50, 9, 1) and steps[3].usage is None
    # The second request: the tools as functions, the assistant's calls, one tool message each.
    second = model.requests[1]
    assert [t.name for t in second.tools] == ["calculate", "getWeather"]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert [c.id for c in second.messages[2].tool_calls] == ["c1", "c2"]
    assert [(m.tool_call_id, m.content) for m in second.messages[3:]] == [
        ("c1", "Paris: sunny"), ("c2", "Tokyo: sunny")]
    assert second.stop == ()


def test_auto_on_a_model_without_tools_speaks_the_text_protocol(tools: ToolRegistry) -> None:
    store = MemoryStore()
    model = ScriptedChatModel(["THOUGHT: t\nACTION: calculate\nINPUT: 6 * 7",
                               "THOUGHT: done\nFINAL_ANSWER: 42"], tools=False)
    done = executor(store, model, tools).run(start(store))
    assert done is not None and done.final_answer == "42" and done.mode is AgentMode.REACT
    assert store.get(done.id).mode is AgentMode.REACT  # type: ignore[union-attr]
    act, observe = [s for s in store.steps_after(done.id) if s.type in (StepType.ACT, StepType.OBSERVE)]
    assert act.call_id and act.call_id == observe.call_id
    assert model.requests[0].tools == () and done.usage.model_calls == 2


def test_the_next_auto_agent_of_a_settled_model_is_claimed_in_its_mode(
    tools: ToolRegistry,
) -> None:
    store = MemoryStore()
    model = ScriptedChatModel(by_turn(["THOUGHT: done\nFINAL_ANSWER: 42"]), tools=False)
    runs = executor(store, model, tools)
    runs.run(start(store))
    assert runs.settled == {"m": AgentMode.REACT}
    later = store.add(Agent.new(user_id=uuid.uuid4(), goal="again", model="m", max_steps=3))
    claimed = store.claim(later.id, modes=runs.settled)
    assert claimed is not None and claimed.mode is AgentMode.REACT
    recorded: list[AgentMode] = []
    store.set_mode = lambda agent_id, attempt, mode: recorded.append(mode)  # type: ignore[method-assign]
    done = runs.run(claimed)
    assert done is not None and done.final_answer == "42" and recorded == []


def test_native_on_a_model_without_tools_fails_at_its_first_step(tools: ToolRegistry) -> None:
    store = MemoryStore()
    done = executor(store, ScriptedChatModel([], tools=False), tools).run(
        start(store, mode=AgentMode.NATIVE))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.MODEL_ERROR
    assert "`auto`" in (done.error or "") and "`react`" in (done.error or "")
    assert [s.type for s in store.steps_after(done.id)] == [StepType.ERROR]


def test_malformed_arguments_and_unknown_tools_are_observations(tools: ToolRegistry) -> None:
    store = MemoryStore()
    bad = ChatReply("", "m", tool_calls=(
        call("calculate", '{"expression": ', "c1"), call("calculate", '{"expression": 5}', "c2"),
        call("teleport", "{}", "c3")))
    model = ScriptedChatModel([bad, ChatReply("ok", "m")], tools=True)
    done = executor(store, model, tools).run(start(store))
    assert done is not None and done.status is AgentStatus.COMPLETED
    observed = {s.call_id: s.content for s in store.steps_after(done.id) if s.type is StepType.OBSERVE}
    assert "not valid JSON" in observed["c1"] and "expression" in observed["c1"]
    assert observed["c2"].startswith("Invalid arguments for tool 'calculate' at expression: 5 is")
    assert observed["c2"].endswith('Call it again with arguments like {"expression": string}')
    assert "Unknown tool 'teleport'" in observed["c3"] and "calculate" in observed["c3"]


def test_resume_runs_only_the_calls_without_observation_and_never_asks_again(
    tools: ToolRegistry, weather: SlowWeather
) -> None:
    store = MemoryStore()
    agent = start(store)
    # The lost attempt wrote [THINK, ACT, ACT] and died before the observations.
    made = IterationRows(step=0, seq=1, duration_ms=0, usage=Usage())
    written = NativeStrategy().rows(TWO_CALLS, made, tools=tools)
    store.append_steps(agent.id, 1, written, step_count=1)
    store.agents[agent.id] = replace(store.agents[agent.id], attempt=2, mode=AgentMode.NATIVE)
    again = ScriptedChatModel(by_turn([TWO_CALLS, DONE]), tools=True)
    done = executor(store, again, tools).run(store.agents[agent.id])
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert again.call_count == 1  # only the reply after the calls
    assert sorted(weather.calls) == ["Paris", "Tokyo"]
    # The keys the lost attempt's calls had: a tool can tell these runs are not new calls.
    assert sorted(weather.keys) == [f"{agent.id}:c1", f"{agent.id}:c2"]
    assert [m.role for m in again.calls[0]] == ["system", "user", "assistant", "tool", "tool"]


class Rendezvous:
    """A blocking tool whose calls wait for each other: `parties` calls end only when
    they all run at once; one left waiting past MEET_TIMEOUT_S fails."""

    name = "meet"
    description = "Wait for the others."

    def __init__(self, parties: int) -> None:
        self.input_schema = {"type": "object", "properties": {"who": {"type": "string"}},
                             "required": ["who"]}
        self.barrier = threading.Barrier(parties, timeout=MEET_TIMEOUT_S)

    def run(self, arguments: dict[str, str], *, context: ToolContext) -> str:
        self.barrier.wait()  # BrokenBarrierError past the deadline: a failed call
        return f"{arguments['who']} met the others"


MEET_TIMEOUT_S = 10.0


def test_the_calls_of_one_reply_run_at_the_same_time(tmp_path: Path) -> None:
    """A reply's blocking calls run at once (README, Modes): run one at a time, the first
    would wait for the others in vain and fail."""
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_TOOL_TIMEOUT": "30"})
    reply = ChatReply("", "m", tool_calls=(call("meet", '{"who": "a"}', "c1"),
                                           call("meet", '{"who": "b"}', "c2"),
                                           call("meet", '{"who": "c"}', "c3")))
    store = MemoryStore()
    with ToolRegistry([Rendezvous(3)], settings=settings) as registry:
        model = ScriptedChatModel([reply, DONE], tools=True)
        done = executor(store, model, registry).run(start(store))
    assert done is not None and done.status is AgentStatus.COMPLETED
    observed = {s.call_id: s.content for s in store.steps_after(done.id) if s.type is StepType.OBSERVE}
    assert observed == {"c1": "a met the others", "c2": "b met the others",
                        "c3": "c met the others"}


SCHEMA = {"type": "object", "properties": {"temp": {"type": "integer"}}, "required": ["temp"]}


def test_a_typed_answer_is_validated_sent_back_and_parsed(tools: ToolRegistry) -> None:
    store = MemoryStore()
    model = ScriptedChatModel(by_turn([ChatReply("warm", "m"), ChatReply('{"temp": "hot"}', "m"),
                                       ChatReply('```json\n{"temp": 21}\n```', "m")]), tools=True)
    done = executor(store, model, tools).run(start(store, schema=SCHEMA))
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert done.output == {"temp": 21} and store.get(done.id).output == {"temp": 21}  # type: ignore[union-attr]
    assert [(s.step, s.type.value) for s in store.steps_after(done.id)] == [
        (0, "FINAL"), (0, "ERROR"), (1, "FINAL"), (1, "ERROR"), (2, "FINAL")]
    last = model.calls[2]
    assert [m.role for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "not JSON" in last[3].content and "temp" in last[5].content
    assert json.dumps(SCHEMA) not in last[1].content and '"required":["temp"]' in last[1].content
    # The schema goes to the provider each time; once an answer was sent back, the
    # answer is what the model owes (Ollama then holds even a reply beside tools to it).
    assert [r.output_schema for r in model.requests] == [SCHEMA] * 3
    assert [r.answer_due for r in model.requests] == [False, True, True]


def test_a_typed_answer_that_never_validates_fails_the_agent(tools: ToolRegistry) -> None:
    store = MemoryStore()
    model = ScriptedChatModel([ChatReply("no", "m")] * 3, tools=True)
    done = executor(store, model, tools).run(start(store, schema=SCHEMA))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.INVALID_OUTPUT and "3 tries" in (done.error or "")
    assert done.output is None and model.call_count == 3


def test_structured_output_goes_to_the_provider_when_no_tool_is_offered(tmp_path: Path) -> None:
    store = MemoryStore()
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    with ToolRegistry([], settings=settings) as none:
        model = ScriptedChatModel([ChatReply('{"temp": 3}', "m")], tools=True)
        done = executor(store, model, none).run(start(store, schema=SCHEMA))
    assert done is not None and done.output == {"temp": 3}
    assert model.requests[0].output_schema == SCHEMA


def test_tokens_are_counted_by_model_and_direction(tools: ToolRegistry) -> None:
    def counted(direction: str) -> float:
        return REGISTRY.get_sample_value(
            "jarvis_model_tokens_total", {"model": "m-tokens", "direction": direction}) or 0.0

    before = counted("input"), counted("output")
    store = MemoryStore()
    agent = store.add(Agent.new(user_id=uuid.uuid4(), goal="g", model="m-tokens", max_steps=3)
                      .with_running(attempt=1))
    model = ScriptedChatModel([TWO_CALLS, DONE], tools=True)
    Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
             limits=Limits(step_timeout_s=5, total_timeout_s=30), timings=PrometheusTimings()).run(agent)
    assert (counted("input") - before[0], counted("output") - before[1]) == (80, 16)
