"""Approvals in the database, on SQLite and PostgreSQL: the wait and its webhook in one
transaction, the answer as a compare-and-set, the timeout's query, steps' call_id."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from jarvis_agents import approvals
from jarvis_agents.errors import Conflict, RateLimited
from jarvis_agents.lifecycle import Agent, AgentStatus, StepType, StopReason, utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.repository import Repository
from tests.support.store import new_agent
from tests.support.store import waiting as waiting_agent

pytestmark = pytest.mark.integration


def waiting(repository: Repository, *, webhook: bool = False) -> tuple[Agent, str]:
    """A WAITING agent of a new user's (tests.support.store.waiting)."""
    user, _ = repository.users.create(f"u{uuid.uuid4().hex[:8]}")
    return waiting_agent(repository, user.id,
                         webhook_url="https://hooks.example.com/x" if webhook else None)


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


def test_an_answer_past_the_active_limit_is_refused_and_the_agent_goes_on_waiting(
    repository: Repository,
) -> None:
    agent, call_id = waiting(repository)
    repository.create_agent(new_agent(agent.user_id))  # PENDING: one active
    with pytest.raises(RateLimited, match="the limit is 1") as refused:
        approvals.answer(repository, agent, call_id=call_id, approve=True, max_active=1)
    assert refused.value.code == "too_many_active_agents"  # the create's code
    stored = repository.get(agent.id)
    assert stored is not None and stored.status is AgentStatus.WAITING
    assert stored.waiting_for == agent.waiting_for and stored.approval is None
    # A denial resumes the agent too: it counts the same.
    with pytest.raises(RateLimited):
        approvals.answer(repository, agent, call_id=call_id, approve=False, max_active=1)

    answered = approvals.answer(repository, agent, call_id=call_id, approve=True, max_active=2)
    assert answered.status is AgentStatus.PENDING
    # A second answer at the limit is told it lost the race, not to wait for room.
    with pytest.raises(Conflict, match="answered or cancelled meanwhile"):
        approvals.answer(repository, agent, call_id=call_id, approve=True, max_active=2)


def test_concurrent_answers_never_take_the_user_past_the_limit(pg_url: str) -> None:
    """Eight answers at once for a user one agent short of a limit of three: the check
    and the change are one step, so exactly two go through."""
    repository = repository_for(make_engine(pg_url, pool_size=10))
    try:
        user, _ = repository.users.create("many-waiting")
        repository.create_agent(new_agent(user.id))
        waiting_ones = [waiting_agent(repository, user.id) for _ in range(8)]
        start = threading.Barrier(len(waiting_ones))
        outcomes: list[str] = []

        def answer(agent: Agent, call_id: str) -> None:
            start.wait()
            try:
                approvals.answer(repository, agent, call_id=call_id, approve=True, max_active=3)
                outcomes.append("resumed")
            except RateLimited:
                outcomes.append("refused")

        threads = [threading.Thread(target=answer, args=pair) for pair in waiting_ones]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(outcomes) == ["refused"] * 6 + ["resumed"] * 2
        agents, _ = repository.list_agents(user.id, limit=20)
        assert sum(a.status is not AgentStatus.WAITING for a in agents) == 3
    finally:
        repository.engine.dispose()


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
