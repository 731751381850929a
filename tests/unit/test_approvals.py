"""Approvals on the in-memory store: a gated call waits, an answer resumes it exactly once."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from jarvis_agents import approvals
from jarvis_agents.approvals import ApprovalGate
from jarvis_agents.config import Settings
from jarvis_agents.errors import Conflict, RateLimited
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus, StepType, StopReason, utcnow
from jarvis_agents.llm.scripted import ScriptedChatModel
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry

SCRIPT = [
    "THOUGHT: multiply.\nACTION: calculate\nINPUT: 6*7",
    "THOUGHT: done.\nFINAL_ANSWER: 42",
]


class CountingEcho:
    """A blocking tool that counts its calls."""

    name = "echo"
    description = "Repeats its input."
    input_hint = "anything"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        self.calls.append(tool_input)
        return f"echo: {tool_input}"


@pytest.fixture
def tools(tmp_path: Path):  # type: ignore[no-untyped-def]
    registry = ToolRegistry([CalculateTool(), CountingEcho()],
                            settings=Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}))
    yield registry
    registry.close()


def executor(store: MemoryStore, script: list[str], tools: ToolRegistry, *,
             always: tuple[str, ...] = (), events: MemoryEventBus | None = None,
             total_s: float = 30) -> Executor:
    return Executor(store=store, model=ScriptedChatModel(script), tools=tools,
                    events=events or MemoryEventBus(), approvals=ApprovalGate(always),
                    limits=Limits(step_timeout_s=5, total_timeout_s=total_s))


def start(store: MemoryStore, approve_tools: tuple[str, ...] | None = ("calculate",)) -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal="6*7?", model="m", max_steps=5,
                      approve_tools=approve_tools)
    return store.add(agent.with_running(attempt=1))


def resume(store: MemoryStore, agent_id: uuid.UUID) -> Agent:
    """What a claim does: PENDING → RUNNING under the next attempt."""
    agent = store.agents[agent_id]
    store.agents[agent_id] = agent.with_running(attempt=agent.attempt + 1)
    return store.agents[agent_id]


def test_a_gated_call_waits_and_an_approval_runs_it_once(tools: ToolRegistry) -> None:
    store, events = MemoryStore(), MemoryEventBus()
    agent = start(store)
    waiting = executor(store, SCRIPT, tools, events=events).run(agent)
    assert waiting is not None and waiting.status is AgentStatus.WAITING
    steps = store.steps_after(agent.id)
    assert [s.type for s in steps] == [StepType.THINK, StepType.ACT]
    act = steps[-1]
    assert act.call_id and act.call_id.startswith("call_")
    assert store.agents[agent.id].waiting_for == {"call_id": act.call_id, "tool": "calculate",
                                                  "input": "6*7"}
    assert events.messages[-1].data["status"] == "WAITING"

    answered = approvals.answer(store, store.agents[agent.id], call_id=act.call_id, approve=True)
    assert answered.status is AgentStatus.PENDING and answered.waiting_for is None
    with pytest.raises(Conflict, match="PENDING, not waiting"):
        approvals.answer(store, answered, call_id=act.call_id, approve=True)

    done = executor(store, SCRIPT[1:], tools).run(resume(store, agent.id))
    assert done is not None and done.status is AgentStatus.COMPLETED and done.final_answer == "42"
    observe = [s for s in store.steps_after(agent.id) if s.type is StepType.OBSERVE]
    assert len(observe) == 1 and observe[0].content == "42" and observe[0].call_id == act.call_id


def test_an_edited_input_runs_instead_and_a_denial_is_the_observation(tools: ToolRegistry) -> None:
    echo = tools.get("echo")
    assert echo is not None
    script = ["THOUGHT: say it.\nACTION: echo\nINPUT: hello", "THOUGHT: ok.\nFINAL_ANSWER: said"]
    for approve, given, expected in [(True, "goodbye", "echo: goodbye"),
                                     (False, None, "denied: not today")]:
        store = MemoryStore()
        agent = start(store, approve_tools=("*",))
        executor(store, script, tools).run(agent)
        call_id = store.steps_after(agent.id)[-1].call_id
        assert call_id is not None
        approvals.answer(store, store.agents[agent.id], call_id=call_id, approve=approve,
                         tool_input=given, reason=None if approve else "not today")
        executor(store, script[1:], tools).run(resume(store, agent.id))
        observe = [s for s in store.steps_after(agent.id) if s.type is StepType.OBSERVE]
        assert [s.content for s in observe] == [expected]
        assert store.agents[agent.id].status is AgentStatus.COMPLETED


def test_a_wrong_call_id_or_an_agent_not_waiting_is_a_conflict(tools: ToolRegistry) -> None:
    store = MemoryStore()
    agent = start(store)
    with pytest.raises(Conflict, match="RUNNING, not waiting"):
        approvals.answer(store, agent, call_id="call_x", approve=True)
    executor(store, SCRIPT, tools).run(agent)
    with pytest.raises(Conflict, match="not 'call_x'"):
        approvals.answer(store, store.agents[agent.id], call_id="call_x", approve=True)
    assert store.agents[agent.id].status is AgentStatus.WAITING


def test_an_answer_past_the_active_limit_is_refused_and_the_agent_waits(tools: ToolRegistry) -> None:
    store = MemoryStore()
    agent = start(store)
    executor(store, SCRIPT, tools).run(agent)
    waiting = store.agents[agent.id]
    call_id = (waiting.waiting_for or {})["call_id"]
    store.add(Agent.new(user_id=agent.user_id, goal="busy", model="m", max_steps=5))  # PENDING
    with pytest.raises(RateLimited, match="the limit is 1"):
        approvals.answer(store, waiting, call_id=call_id, approve=True, max_active=1)
    assert store.agents[agent.id] == waiting
    assert approvals.answer(store, waiting, call_id=call_id, approve=True,
                            max_active=2).status is AgentStatus.PENDING


def test_the_operator_list_gates_too_and_other_tools_run_freely(tools: ToolRegistry) -> None:
    store = MemoryStore()
    done = executor(store, SCRIPT, tools).run(start(store, approve_tools=None))
    assert done is not None and done.status is AgentStatus.COMPLETED
    waiting = executor(store, SCRIPT, tools, always=("Calculate",)).run(start(store, approve_tools=None))
    assert waiting is not None and waiting.status is AgentStatus.WAITING


def test_waiting_time_is_left_out_of_the_total_timeout(tools: ToolRegistry) -> None:
    store = MemoryStore()
    agent = start(store)
    executor(store, SCRIPT, tools, total_s=5).run(agent)
    call_id = store.steps_after(agent.id)[-1].call_id
    assert call_id is not None
    # It started an hour ago and waited for 59 minutes 58 seconds of it.
    hour_ago = utcnow() - timedelta(hours=1)
    waiting = replace(store.agents[agent.id], started_at=hour_ago,
                      updated_at=utcnow() - timedelta(minutes=59, seconds=58))
    store.agents[agent.id] = waiting
    approvals.answer(store, waiting, call_id=call_id, approve=True)
    done = executor(store, SCRIPT[1:], tools, total_s=5).run(resume(store, agent.id))
    assert done is not None and done.status is AgentStatus.COMPLETED


def test_an_unanswered_wait_fails_once_its_timeout_passes(tools: ToolRegistry) -> None:
    store = MemoryStore()
    agent = start(store)
    executor(store, SCRIPT, tools).run(agent)
    assert approvals.expire(store, store.agents[agent.id], timeout_s=60) is None
    store.agents[agent.id] = replace(store.agents[agent.id],
                                     updated_at=utcnow() - timedelta(seconds=61))
    failed = approvals.expire(store, store.agents[agent.id], timeout_s=60)
    assert failed is not None and failed.status is AgentStatus.FAILED
    assert failed.stop_reason is StopReason.APPROVAL_TIMEOUT and "60 s" in (failed.error or "")


def test_two_gated_calls_of_one_native_reply_are_each_asked_once(tools: ToolRegistry) -> None:
    from jarvis_agents.llm.base import ChatReply, ToolCall

    echo = tools.get("echo")
    assert echo is not None
    two = ChatReply("", "m", tool_calls=(ToolCall.from_text("echo", '{"input": "a"}', id="c1"),
                                         ToolCall.from_text("echo", '{"input": "b"}', id="c2")))
    done_reply = ChatReply("both said", "m")
    store = MemoryStore()
    agent = start(store, approve_tools=("echo",))

    def run_once(script: list[object]) -> Agent | None:
        model = ScriptedChatModel(script, tools=True)  # type: ignore[arg-type]
        return Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=5, total_timeout_s=30)).run(
            resume(store, agent.id) if store.agents[agent.id].status is AgentStatus.PENDING
            else store.agents[agent.id])

    assert run_once([two]).status is AgentStatus.WAITING  # type: ignore[union-attr]
    assert store.agents[agent.id].waiting_for["call_id"] == "c1"  # type: ignore[index]
    approvals.answer(store, store.agents[agent.id], call_id="c1", approve=True)
    assert run_once([]).status is AgentStatus.WAITING  # type: ignore[union-attr]
    assert store.agents[agent.id].waiting_for["call_id"] == "c2"  # type: ignore[index]
    approvals.answer(store, store.agents[agent.id], call_id="c2", approve=False, reason="no")
    done = run_once([done_reply])
    assert done is not None and done.status is AgentStatus.COMPLETED
    observed = {s.call_id: s.content for s in store.steps_after(agent.id) if s.type is StepType.OBSERVE}
    assert observed["c2"] == "denied: no" and observed["c1"].startswith("echo:")
