"""The lifecycle table: every (from, to) pair is either allowed or refused."""

from __future__ import annotations

import itertools
import uuid

import pytest

from jarvis_agents.errors import InvalidTransition
from jarvis_agents.lifecycle import (
    TRANSITIONS,
    Agent,
    AgentStatus,
    StopReason,
    check_transition,
)

ALLOWED = {
    (AgentStatus.PENDING, AgentStatus.RUNNING),
    (AgentStatus.PENDING, AgentStatus.CANCELLED),
    (AgentStatus.RUNNING, AgentStatus.COMPLETED),
    (AgentStatus.RUNNING, AgentStatus.FAILED),
    (AgentStatus.RUNNING, AgentStatus.CANCELLED),
    (AgentStatus.RUNNING, AgentStatus.WAITING),
    (AgentStatus.WAITING, AgentStatus.PENDING),
    (AgentStatus.WAITING, AgentStatus.FAILED),
    (AgentStatus.WAITING, AgentStatus.CANCELLED),
}


def make_agent(status: AgentStatus = AgentStatus.PENDING) -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    if status is AgentStatus.PENDING:
        return agent
    agent = agent.with_running(attempt=1)
    if status is AgentStatus.WAITING:
        return agent.with_waiting(call_id="call_1", tool="calculate", tool_input="6*7")
    if status is AgentStatus.COMPLETED:
        return agent.with_completed("42")
    if status is AgentStatus.FAILED:
        return agent.with_failed("boom", stop_reason=StopReason.MODEL_ERROR)
    if status is AgentStatus.CANCELLED:
        return agent.with_cancelled()
    return agent


def move(agent: Agent, target: AgentStatus) -> Agent:
    if target is AgentStatus.RUNNING:
        return agent.with_running(attempt=agent.attempt + 1)
    if target is AgentStatus.COMPLETED:
        return agent.with_completed("answer")
    if target is AgentStatus.FAILED:
        return agent.with_failed("error", stop_reason=StopReason.MAX_STEPS)
    if target is AgentStatus.CANCELLED:
        return agent.with_cancelled()
    if target is AgentStatus.WAITING:
        return agent.with_waiting(call_id="call_1", tool="calculate", tool_input="6*7")
    return agent.with_answered(approve=True, tool_input=None, reason=None)


PAIRS = list(itertools.product(AgentStatus, AgentStatus))


@pytest.mark.parametrize(("current", "target"), PAIRS, ids=lambda s: s.value)
def test_every_pair_follows_the_table(current: AgentStatus, target: AgentStatus) -> None:
    agent = make_agent(current)
    if (current, target) in ALLOWED:
        moved = move(agent, target)
        assert moved.status is target
        assert moved.is_terminal == (target in {AgentStatus.COMPLETED, AgentStatus.FAILED, AgentStatus.CANCELLED})
        assert (moved.completed_at is not None) == moved.is_terminal
    else:
        with pytest.raises(InvalidTransition, match=f"{current.value} to {target.value}"):
            move(agent, target)


@pytest.mark.parametrize("current", [s for s in AgentStatus if s is not AgentStatus.WAITING],
                         ids=lambda s: s.value)
def test_only_an_answered_wait_goes_back_to_pending(current: AgentStatus) -> None:
    with pytest.raises(InvalidTransition):
        check_transition(current, AgentStatus.PENDING)


def test_table_matches_the_contract() -> None:
    allowed = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert allowed == ALLOWED


def test_agent_json_has_only_the_fields_of_its_state() -> None:
    completed = make_agent(AgentStatus.COMPLETED).to_json()
    assert completed["final_answer"] == "42"
    assert completed["stop_reason"] == "final_answer"
    assert completed["error"] is None
    failed = make_agent(AgentStatus.FAILED).to_json()
    assert failed["error"] == "boom" and failed["final_answer"] is None
    pending = make_agent().to_json()
    assert pending["status"] == "PENDING" and pending["stop_reason"] is None
    assert pending["started_at"] is None and pending["duration_ms"] is None
    assert str(pending["created_at"]).endswith("Z")


def test_waiting_for_shows_only_while_waiting() -> None:
    waiting = make_agent(AgentStatus.WAITING)
    body = waiting.to_json()
    assert body["status"] == "WAITING" and body["stop_reason"] is None
    assert body["waiting_for"] == {"call_id": "call_1", "tool": "calculate", "input": "6*7",
                                   "since": body["updated_at"]}
    answered = waiting.with_answered(approve=False, tool_input=None, reason="no")
    assert answered.to_json()["waiting_for"] is None
    assert answered.approval == {"call_1": {"approve": False, "input": None, "reason": "no"}}
    assert make_agent(AgentStatus.RUNNING).to_json()["waiting_for"] is None
