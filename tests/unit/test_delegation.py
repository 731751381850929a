"""Agents that call agents in the loop (jarvis_agents/delegation/): a scripted model, the
in-memory store and dispatcher; a crash cut between any two writes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.assistants import Assistant, AssistantConfig
from jarvis_agents.config import Settings
from jarvis_agents.delegation import Delegation
from jarvis_agents.dispatch import MemoryDispatcher
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, Step, StepType, Usage, utcnow
from jarvis_agents.llm.scripted import ScriptedChatModel
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.registry import ToolRegistry

CALLER_SCRIPT = [
    "THOUGHT: ask\nACTION: ask_researcher\nINPUT: Find the boiling point",
    "THOUGHT: done\nFINAL_ANSWER: it said so",
]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_MAX_DELEGATION_DEPTH": "1"})


@pytest.fixture
def tools(settings: Settings) -> Iterator[ToolRegistry]:
    with ToolRegistry([], settings=settings) as registry:
        yield registry


class Team:
    def __init__(self, settings: Settings, tools: ToolRegistry) -> None:
        self.store = MemoryStore()
        self.dispatcher = MemoryDispatcher()
        self.delegation = Delegation(repository=self.store, settings=settings,
                                     dispatcher=self.dispatcher, events=MemoryEventBus())
        self.executor = Executor(
            store=self.store, model=ScriptedChatModel(self.responder), tools=tools,
            events=MemoryEventBus(), limits=Limits(step_timeout_s=5, total_timeout_s=30),
            delegation=self.delegation)
        self.user_id = uuid.uuid4()
        now = utcnow()
        self.store.assistants.insert(Assistant(uuid.uuid4(), self.user_id, "researcher", 1,
                                               AssistantConfig(description="Finds things."),
                                               now, now))

    @staticmethod
    def responder(messages: Any) -> str:
        goal = messages[1].content
        turn = sum(1 for m in messages if m.role == "assistant")
        if goal == "Find the boiling point" and turn == 0:
            return "THOUGHT: no\nFINAL_ANSWER: 100 C"
        return CALLER_SCRIPT[min(turn, 1)]

    def caller(self, *, depth: int = 0) -> Agent:
        agent = Agent.new(user_id=self.user_id, goal="What boils?", model="m", max_steps=5,
                          mode=AgentMode.REACT, delegates=("researcher",))
        return self.store.add(replace(agent, depth=depth))

    def run(self, agent_id: uuid.UUID) -> Agent | None:
        """Claim and run the agent as a worker would."""
        claimed = self.store.claim(agent_id)
        assert claimed is not None
        ended = self.executor.run(claimed)
        if ended is not None and ended.is_terminal:
            self.delegation.child_ended(ended)
        return ended


@pytest.fixture
def team(settings: Settings, tools: ToolRegistry) -> Team:
    return Team(settings, tools)


def test_the_delegate_is_a_tool_the_model_is_shown(team: Team) -> None:
    agent = team.caller()
    registry = team.delegation.tools(agent, team.executor.tools)
    listed = {tool.name: tool for tool in registry.listed()}
    assert listed["ask_researcher"].description == "Finds things."
    assert listed["ask_researcher"].input_schema["required"] == ["goal"]


def test_a_crash_before_the_wait_leaves_nothing_and_the_resume_makes_the_child_once(
        team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = team.caller()
    start = team.store.delegation.start

    def crash(*args: Any, **kwargs: Any) -> bool:
        raise DependencyUnavailable("the database went away")  # before the wait commits

    monkeypatch.setattr(team.store.delegation, "start", crash)
    with pytest.raises(DependencyUnavailable):
        team.run(caller.id)
    # The ACT is written with the children and the wait: none of them is.
    assert team.store.delegation.children(caller.id) == []
    assert team.store.steps_after(caller.id) == []

    monkeypatch.setattr(team.store.delegation, "start", start)
    lost = team.store.get(caller.id)  # RUNNING under the attempt that died: queued again
    team.store.add(replace(lost, status=AgentStatus.PENDING))  # type: ignore[type-var]
    waiting = team.run(caller.id)
    assert waiting is not None and waiting.status is AgentStatus.WAITING
    [act] = [s for s in team.store.steps_after(caller.id) if s.type is StepType.ACT]
    [child] = team.store.delegation.children(caller.id)
    assert child.goal == "Find the boiling point" and child.caller_call_id == act.call_id
    assert [q.agent_id for q in team.dispatcher.queued] == [child.id]

    assert team.run(child.id).status is AgentStatus.COMPLETED  # type: ignore[union-attr]
    assert team.store.get(caller.id).status is AgentStatus.PENDING  # type: ignore[union-attr]
    done = team.run(caller.id)
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert len(team.store.delegation.children(caller.id)) == 1
    observed = [s.content for s in team.store.steps_after(caller.id) if s.type is StepType.OBSERVE]
    assert observed == ["100 C"]
    assert done.usage.model_calls == 2 and team.store.get(caller.id).descendants_usage.model_calls == 1  # type: ignore[union-attr]


def test_an_act_written_without_its_child_gets_it_once(team: Team) -> None:
    """A call's ACT persisted, then the worker lost (as after a person approved the call,
    or beside a tool of its own): the next attempt starts the child, once."""
    caller = team.caller()
    claimed = team.store.claim(caller.id)
    assert claimed is not None
    act = Step(1, 0, StepType.ACT, "Find the boiling point", tool="ask_researcher", call_id="call_1")
    team.store.append_steps(caller.id, claimed.attempt, [act], step_count=1)
    team.store.add(replace(team.store.get(caller.id), status=AgentStatus.PENDING))  # type: ignore[type-var]
    waiting = team.run(caller.id)
    assert waiting is not None and waiting.status is AgentStatus.WAITING
    [child] = team.store.delegation.children(caller.id)
    assert child.caller_call_id == "call_1"
    assert [s.seq for s in team.store.steps_after(caller.id)] == [1]


def test_two_wakes_of_one_caller_resume_it_once(team: Team) -> None:
    caller = team.caller()
    team.run(caller.id)
    [child] = team.store.delegation.children(caller.id)
    team.run(child.id)  # its end woke the caller
    again = team.store.get(caller.id)
    assert again.status is AgentStatus.PENDING  # type: ignore[union-attr]
    assert team.delegation.child_ended(team.store.get(child.id)) is None  # type: ignore[arg-type]
    assert [q.agent_id for q in team.dispatcher.queued].count(caller.id) == 1


def test_a_call_past_the_depth_limit_makes_nothing_and_says_so(team: Team) -> None:
    caller = team.caller(depth=1)  # JARVIS_MAX_DELEGATION_DEPTH is 1 here
    done = team.run(caller.id)
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert team.store.delegation.children(caller.id) == []
    [observed] = [s for s in team.store.steps_after(caller.id) if s.type is StepType.OBSERVE]
    assert "depth 2" in observed.content and "JARVIS_MAX_DELEGATION_DEPTH" in observed.content


def test_a_cascade_a_crash_cut_short_is_finished_and_counted_by_the_sweep(team: Team) -> None:
    caller = team.caller()
    team.run(caller.id)
    [child] = team.store.delegation.children(caller.id)
    claimed = team.store.claim(child.id)
    assert claimed is not None
    thought = Step(1, 0, StepType.THINK, "looking", usage=Usage(7, 3, 1))
    team.store.append_steps(child.id, claimed.attempt, [thought], step_count=1)
    # The caller's cancel committed, its cascade did not run (the process died).
    assert team.store.transition(caller.id, AgentStatus.WAITING, AgentStatus.CANCELLED)
    assert team.delegation.sweep() == 1
    assert team.store.get(child.id).status is AgentStatus.CANCELLED  # type: ignore[union-attr]
    assert team.store.get(caller.id).descendants_usage == Usage(7, 3, 1)  # type: ignore[union-attr]
