"""Agents to store, for the store's tests (tests/integration/test_store_*.py)."""

from __future__ import annotations

import uuid

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType
from jarvis_agents.store.interface import AgentStore


def new_agent(user_id: uuid.UUID, goal: str = "goal", **kw: object) -> Agent:
    return Agent.new(user_id=user_id, goal=goal, model="test-model", max_steps=5, **kw)  # type: ignore[arg-type]


def running(store: AgentStore, user_id: uuid.UUID) -> Agent:
    """A new agent of the user's, claimed: RUNNING under attempt 1."""
    return running_of(store, new_agent(user_id))


def running_of(store: AgentStore, agent: Agent) -> Agent:
    """`agent` created and claimed: RUNNING under attempt 1."""
    created, _ = store.create_agent(agent)
    claimed = store.claim(created.id)
    assert claimed is not None and claimed.attempt == 1
    return claimed


def waiting(store: AgentStore, user_id: uuid.UUID, **kw: object) -> tuple[Agent, str]:
    """A new agent of the user's moved RUNNING → WAITING on a calculate call, as the
    executor does it; the agent as stored, and the call's id."""
    claimed = running_of(store, new_agent(user_id, "6*7?", approve_tools=("calculate",), **kw))
    call_id = "call_abc"
    rows = [Step(1, 0, StepType.THINK, "multiply"),
            Step(2, 0, StepType.ACT, "6*7", tool="calculate", call_id=call_id)]
    moved = claimed.with_waiting(call_id=call_id, tool="calculate", tool_input="6*7")
    assert store.transition(
        claimed.id, AgentStatus.RUNNING, AgentStatus.WAITING, attempt=claimed.attempt, steps=rows,
        waiting_for=moved.waiting_for, heartbeat_at=None, now=moved.updated_at)
    stored = store.get(claimed.id)
    assert stored is not None
    return stored, call_id


def iteration(step: int) -> list[Step]:
    """One inline-tool iteration's rows, as the executor writes them."""
    seq = 3 * step + 1
    return [Step(seq, step, StepType.THINK, f"thought {step}"),
            Step(seq + 1, step, StepType.ACT, "1 + 1", tool="calculate"),
            Step(seq + 2, step, StepType.OBSERVE, "2", tool="calculate")]
