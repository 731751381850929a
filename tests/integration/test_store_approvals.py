"""Approvals in the database, on SQLite and PostgreSQL: the wait and its webhook in one
transaction, the answer as a compare-and-set, the timeout's query, steps' call_id."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from jarvis_agents import approvals
from jarvis_agents.errors import Conflict
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.repository import Repository

pytestmark = pytest.mark.integration


def waiting(repository: Repository, *, webhook: bool = False) -> tuple[Agent, str]:
    """A RUNNING agent moved to WAITING on a calculate call, as the executor does it."""
    user, _ = repository.users.create(f"u{uuid.uuid4().hex[:8]}")
    agent = Agent.new(user_id=user.id, goal="6*7?", model="m", max_steps=5,
                      approve_tools=("calculate",),
                      webhook_url="https://hooks.example.com/x" if webhook else None)
    repository.create_agent(agent)
    claimed = repository.claim(agent.id)
    assert claimed is not None
    call_id = "call_abc"
    rows = [Step(1, 0, StepType.THINK, "multiply"),
            Step(2, 0, StepType.ACT, "6*7", tool="calculate", call_id=call_id)]
    moved = claimed.with_waiting(call_id=call_id, tool="calculate", tool_input="6*7")
    assert repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.WAITING, attempt=claimed.attempt, steps=rows,
        waiting_for=moved.waiting_for, heartbeat_at=None, now=moved.updated_at)
    stored = repository.get(agent.id)
    assert stored is not None
    return stored, call_id


def test_the_wait_writes_its_steps_and_owes_its_webhook(repository: Repository) -> None:
    agent, call_id = waiting(repository, webhook=True)
    assert agent.status is AgentStatus.WAITING and agent.approve_tools == ("calculate",)
    assert agent.waiting_for == {"call_id": call_id, "tool": "calculate", "input": "6*7"}
    assert agent.to_json()["waiting_for"]["since"] == agent.to_json()["updated_at"]
    assert agent.step_count == 1
    steps = repository.steps_after(agent.id)
    assert [(s.type, s.call_id) for s in steps] == [(StepType.THINK, None), (StepType.ACT, call_id)]
    assert [d["event"] for d in repository.outbox.of_agent(agent.id)] == ["agent.waiting"]


def test_an_answer_is_a_compare_and_set(repository: Repository) -> None:
    agent, call_id = waiting(repository)
    with pytest.raises(Conflict, match="not 'call_zzz'"):
        approvals.answer(repository, agent, call_id="call_zzz", approve=True)
    answered = approvals.answer(repository, agent, call_id=call_id, approve=True,
                                tool_input="6*8", reason="close enough")
    assert answered.status is AgentStatus.PENDING and answered.waiting_for is None
    assert answered.approval == {call_id: {"approve": True, "input": "6*8",
                                           "reason": "close enough"}}
    assert answered.task_id == f"{agent.id}:{agent.attempt + 1}"
    # The same answer from a reader that still saw it WAITING loses the race.
    with pytest.raises(Conflict, match="answered or cancelled meanwhile"):
        approvals.answer(repository, agent, call_id=call_id, approve=False)
    resumed = repository.claim(agent.id)
    assert resumed is not None and resumed.attempt == agent.attempt + 1
    assert resumed.approval is not None and resumed.approval[call_id]["input"] == "6*8"


def test_waiting_agents_past_their_timeout_fail(repository: Repository) -> None:
    agent, _ = waiting(repository)
    assert repository.waiting_since(utcnow() - timedelta(seconds=60)) == []
    overdue = repository.waiting_since(utcnow() + timedelta(seconds=1))
    assert [a.id for a in overdue] == [agent.id]
    early = replace(overdue[0], updated_at=utcnow() - timedelta(seconds=61))
    failed = approvals.expire(repository, early, timeout_s=60)
    assert failed is not None and failed.status is AgentStatus.FAILED
    assert failed.stop_reason is StopReason.APPROVAL_TIMEOUT


def test_a_waiting_agent_can_be_cancelled_and_not_answered_after(repository: Repository) -> None:
    agent, call_id = waiting(repository)
    cancelled = agent.with_cancelled()
    assert repository.transition(agent.id, AgentStatus.WAITING, AgentStatus.CANCELLED,
                                 stop_reason=cancelled.stop_reason,
                                 completed_at=cancelled.completed_at)
    with pytest.raises(Conflict):
        approvals.answer(repository, agent, call_id=call_id, approve=True)
    stored = repository.get(agent.id)
    assert stored is not None and stored.status is AgentStatus.CANCELLED
    assert stored.to_json()["waiting_for"] is None


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_migration_keeps_every_row_and_learns_waiting(backend: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from contextlib import nullcontext

    from alembic import command
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from jarvis_agents.store.database import alembic_config, make_engine, upgrade
    from tests.conftest import new_pg_database

    made = nullcontext(f"sqlite:///{tmp_path / 'old.db'}") if backend == "sqlite" else new_pg_database()
    with made as url:
        upgrade(url)
        engine, config = make_engine(url), alembic_config(url)

        def migrate(move, target: str) -> None:  # type: ignore[no-untyped-def]
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                move(config, target)

        try:
            # The schema before native tool calling and approvals, whose migrations must
            # keep every row (no rebuild of `agents` on SQLite: its cascade took the steps).
            migrate(command.downgrade, "0008")
            repository = repository_for(engine)
            user, _ = repository.users.create("before")
            agent = Agent.new(user_id=user.id, goal="g", model="m", max_steps=5)
            with engine.begin() as conn:  # the columns of then only
                conn.execute(text(
                    "INSERT INTO agents (id, user_id, goal, status, model, max_steps, step_count,"
                    " created_at, updated_at, attempt, losses, thread_id) VALUES (:id, :user, 'g',"
                    " 'PENDING', 'm', 5, 0, :now, :now, 0, 0, :id)"),
                    {"id": agent.id.hex, "user": user.id.hex, "now": utcnow()})
                conn.execute(text(
                    "INSERT INTO agent_steps (agent_id, seq, step, type, content, created_at,"
                    " attempt) VALUES (:id, 1, 0, 'THINK', 'x', :now, 1)"), {"id": agent.id.hex, "now": utcnow()})
            migrate(command.upgrade, "head")
            assert [s.content for s in repository.steps_after(agent.id)] == ["x"]
            with engine.begin() as conn:
                conn.execute(text("UPDATE agents SET status = 'WAITING'"))
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(text("UPDATE agents SET status = 'ASLEEP'"))
        finally:
            engine.dispose()
