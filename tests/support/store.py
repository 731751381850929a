"""Agents to store, for the store's tests (tests/integration/test_store_*.py)."""

from __future__ import annotations

import uuid

from jarvis_agents.lifecycle import Agent, Step, StepType
from jarvis_agents.store.interface import AgentStore


def new_agent(user_id: uuid.UUID, goal: str = "goal", **kw: object) -> Agent:
    return Agent.new(user_id=user_id, goal=goal, model="test-model", max_steps=5, **kw)  # type: ignore[arg-type]


def running(store: AgentStore, user_id: uuid.UUID) -> Agent:
    """A new agent of the user's, claimed: RUNNING under attempt 1."""
    agent, _ = store.create_agent(new_agent(user_id))
    claimed = store.claim(agent.id)
    assert claimed is not None and claimed.attempt == 1
    return claimed


def iteration(step: int) -> list[Step]:
    """One inline-tool iteration's rows, as the executor writes them."""
    seq = 3 * step + 1
    return [Step(seq, step, StepType.THINK, f"thought {step}"),
            Step(seq + 1, step, StepType.ACT, "1 + 1", tool="calculate"),
            Step(seq + 2, step, StepType.OBSERVE, "2", tool="calculate")]
