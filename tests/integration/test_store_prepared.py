"""The store's statements prepared on PostgreSQL (store/prepared.py): which are, what
a server that loses them or cannot type them gets instead."""

from __future__ import annotations

from typing import Any

import pytest

from jarvis_agents.errors import StaleAttempt
from jarvis_agents.lifecycle import AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.postgres import _APPEND_STEPS
from jarvis_agents.store.prepared import form_of
from tests.support.store import new_agent, running

pytestmark = pytest.mark.integration


def test_the_step_write_is_prepared_and_survives_a_server_that_drops_it(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The step write runs prepared; a server without the statement (as behind a pooler
    in transaction mode) loses no write, and plain SQL is sent from then on."""
    repository = repository_for(make_engine(pg_url, pool_size=1))

    def on_the_writers_connection(sql: str) -> list[tuple[Any, ...]]:
        # The step writes have a connection of their own (connections.HeldConnection).
        with repository._writer.borrow() as pooled, pooled.dbapi_connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def prepared_here() -> list[str]:
        return [name for (name,) in on_the_writers_connection("SELECT name FROM pg_prepared_statements")]

    try:
        user, _ = repository.users.create("prepared")
        agent = running(repository, user.id)
        repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "a")], step_count=1)
        repository.append_steps(agent.id, 1, [Step(2, 0, StepType.ACT, "1 + 1", tool="calculate")],
                                step_count=1)
        # Named after its text: another version's is another.
        assert prepared_here() == [form_of(_APPEND_STEPS).name]
        on_the_writers_connection("DEALLOCATE ALL")
        repository.append_steps(agent.id, 1, [Step(3, 0, StepType.OBSERVE, "2", tool="calculate",
                                                   duration_ms=0)], step_count=1)
        assert "transaction mode" in caplog.text
        repository.append_steps(agent.id, 1, [Step(4, 1, StepType.THINK, "b")], step_count=2)
        assert prepared_here() == []
        assert [s.content for s in repository.steps_after(agent.id)] == ["a", "1 + 1", "2", "b"]
        with pytest.raises(StaleAttempt):  # the plain statement still guards
            repository.append_steps(agent.id, 2, [Step(5, 1, StepType.ACT, "x")], step_count=2)
    finally:
        repository.engine.dispose()


def test_the_hot_statements_run_prepared_and_one_that_cannot_be_runs_as_text(
    pg_url: str,
) -> None:
    """Reading an agent and its steps, the claim and an ending with its steps are each
    prepared once on the connection that runs them and executed from then on; a
    statement whose parameter the server cannot type runs as plain text and works."""
    repository = repository_for(make_engine(pg_url, pool_size=1))  # one pooled connection

    def prepared_here() -> set[str]:
        with repository.connections.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return {statement for (statement,) in cursor.fetchall()}

    try:
        user, _ = repository.users.create("prepared")
        agent, _ = repository.create_agent(new_agent(user.id))
        claimed = repository.claim(agent.id, task_id="t")
        assert claimed is not None and claimed.attempt == 1
        now = utcnow()
        assert repository.transition(
            agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=1,
            steps=[Step(1, 0, StepType.FINAL, "42", created_at=now)], final_answer="42",
            stop_reason=StopReason.FINAL_ANSWER, step_count=1, now=now)
        for _ in range(2):  # the second time, from the statement prepared the first
            ended = repository.get(agent.id)
            assert ended is not None and ended.status is AgentStatus.COMPLETED
            assert [step.content for step in repository.steps_after(agent.id)] == ["42"]
        statements = prepared_here()
        for shown in ("UPDATE agents SET status=", "WITH owned AS (UPDATE agents",
                      "SELECT agents.id, agents.user_id", "SELECT agent_steps.seq"):
            assert any(shown in statement for statement in statements), (shown, statements)

        with repository.connections.cursor() as cursor:
            # Nothing says what type $1 is: PREPARE fails, the text works.
            cursor.execute("SELECT 1 AS nothing WHERE %(value)s IS NULL", {"value": None})
            assert cursor.fetchone() == (1,)
        assert not any("AS nothing" in statement for statement in prepared_here())
        assert repository.connections.prepared.enabled  # that was no pooler's doing
    finally:
        repository.engine.dispose()


def test_a_statement_whose_result_a_migration_changed_is_prepared_afresh() -> None:
    """A migration that changes a column a prepared read returns, run while a process
    holds the statement, costs that process nothing: the read runs, and is prepared
    again for the new type."""
    from sqlalchemy import text

    from tests.conftest import new_pg_database

    with new_pg_database() as url:
        repository = repository_for(make_engine(url, pool_size=1))
        try:
            user, _ = repository.users.create("migrated")
            agent, _ = repository.create_agent(new_agent(user.id))
            assert repository.get(agent.id) is not None  # prepared now
            with repository.engine.begin() as conn:  # another process's migration
                conn.execute(text("ALTER TABLE agents ALTER COLUMN model TYPE varchar(300)"))
            for _ in range(2):  # the first read gives the statement up, the second prepares it
                again = repository.get(agent.id)
                assert again is not None and again.model == agent.model
            with repository.connections.cursor() as cursor:
                cursor.execute("SELECT statement FROM pg_prepared_statements")
                statements = [statement for (statement,) in cursor.fetchall()]
            assert any("SELECT agents.id, agents.user_id" in s for s in statements), statements
        finally:
            repository.engine.dispose()
