"""The SQL of recovering lost attempts: the heartbeat, a hand-back, a take-over, and the
sweeps that put PENDING and stale RUNNING agents back on the queue.

Each is one compare-and-set statement, as in store/repository.py, whose Repository
has these methods from `Recovery`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, String, and_, case, cast, func, or_, select, tuple_, update
from sqlalchemy.engine import Connection, RowMapping

from jarvis_agents.lifecycle import Agent, AgentStatus, utcnow
from jarvis_agents.store.models import AgentRow
from jarvis_agents.store.rows import AGENT_READ, agent_from_row

agents = AgentRow.__table__


def running_under(agent_id: uuid.UUID, attempt: int) -> tuple[ColumnElement[bool], ...]:
    """The attempt guard: the agent is RUNNING under this attempt."""
    return (agents.c.id == agent_id, agents.c.status == AgentStatus.RUNNING.value,
            agents.c.attempt == attempt)


class Recovery:
    """Heartbeats, hand-backs, take-overs and requeue sweeps over `_one_statement`."""

    _one_statement: Callable[[], AbstractContextManager[Connection]]

    def heartbeat(self, owned: Iterable[tuple[uuid.UUID, int]]) -> int:
        """Mark these (agent, attempt) executions alive; returns how many still are.

        The rows are locked in the order of their ids, as the batched step writes
        lock theirs (store/postgres.py): two statements that each lock several agents
        can then never wait for each other.
        """
        pairs = list(owned)
        if not pairs:
            return 0
        alive = (
            select(agents.c.id)
            .where(agents.c.status.is_not_distinct_from(AgentStatus.RUNNING.value),
                   tuple_(agents.c.id, agents.c.attempt).in_(pairs))
            .order_by(agents.c.id)
            .with_for_update(key_share=True)
        )
        with self._one_statement() as conn:
            return conn.execute(
                update(agents).where(agents.c.id.in_(alive)).values(heartbeat_at=utcnow())
            ).rowcount

    def release(self, agent_id: uuid.UUID, attempt: int) -> bool:
        """Hand back a RUNNING agent this attempt owns, for another worker to resume.

        Its heartbeat becomes NULL: whoever takes it over next counts no lost worker.
        The caller enqueues it; a sweep does, one staleness period later, if that failed.
        """
        now = utcnow()
        with self._one_statement() as conn:
            return conn.execute(
                update(agents)
                .where(*running_under(agent_id, attempt))
                .values(heartbeat_at=None, updated_at=now)
            ).rowcount == 1

    def take_over(
        self, agent_id: uuid.UUID, *, attempt: int, stale_before: datetime,
        task_id: str | None = None, now: datetime | None = None,
    ) -> Agent | None:
        """Supersede a RUNNING attempt whose heartbeat stopped or that was handed back;
        None if it is alive or gone. Only a stopped heartbeat counts as a loss."""
        now = now or utcnow()
        with self._one_statement() as conn:
            row = conn.execute(
                update(agents)
                .where(
                    *running_under(agent_id, attempt),
                    or_(agents.c.heartbeat_at.is_(None), agents.c.heartbeat_at < stale_before),
                )
                .values(
                    attempt=attempt + 1, heartbeat_at=now, updated_at=now, task_id=task_id,
                    # A hand-back (release) left heartbeat_at NULL: not a loss.
                    losses=agents.c.losses + case((agents.c.heartbeat_at.is_(None), 0), else_=1),
                )
                .returning(*AGENT_READ)
            ).mappings().first()
        return agent_from_row(row) if row else None

    def forget_task(self, agent_id: uuid.UUID) -> None:
        """Mark a PENDING agent as not on the queue, for the sweeper to enqueue later."""
        with self._one_statement() as conn:
            conn.execute(
                update(agents)
                .where(agents.c.id == agent_id, agents.c.status == AgentStatus.PENDING.value)
                .values(task_id=None)
            )

    def requeue_pending(self, *, untouched_before: datetime, limit: int = 100) -> list[tuple[uuid.UUID, str]]:
        """Claim the PENDING agents whose message to look for on the queue: (id, task
        id) of each; the sweeper sends again those whose message is gone.

        Those not on it (their enqueue failed: task_id NULL) and those untouched since
        `untouched_before` (their message may have died with a worker that had taken
        it, or with a Redis that restarted). Each is claimed once per period, however
        many sweepers run at once (see `_claim_for_requeue`); the task id is the one it
        keeps or is given.
        """
        def condition(table: Any) -> tuple[ColumnElement[bool], ...]:
            return (
                table.c.status == AgentStatus.PENDING.value,
                or_(table.c.task_id.is_(None), table.c.updated_at < untouched_before),
            )

        # A task id of its own when it has none; the same text the sweeper enqueues with.
        rows = self._claim_for_requeue(
            condition, limit, task_id=func.coalesce(agents.c.task_id, cast(agents.c.id, String)))
        return [(row["id"], row["task_id"]) for row in rows]

    def requeue_stale_running(
        self, *, stale_before: datetime, handed_back_before: datetime | None = None,
        limit: int = 100,
    ) -> list[tuple[uuid.UUID, int, bool]]:
        """Claim the RUNNING agents whose attempt is gone: (id, attempt, whether it was
        handed back rather than lost) of each.

        A heartbeat older than `stale_before` and no sweep's claim since then either;
        or none (handed back, which the worker that did it enqueues itself) and no
        hand-back or claim since `handed_back_before` (default: `stale_before`). So one
        look per agent per period, however many sweepers run.
        """
        handed_back_before = handed_back_before or stale_before

        def condition(table: Any) -> tuple[ColumnElement[bool], ...]:
            return (
                table.c.status == AgentStatus.RUNNING.value,
                or_(and_(table.c.heartbeat_at < stale_before, table.c.updated_at < stale_before),
                    and_(table.c.heartbeat_at.is_(None), table.c.updated_at < handed_back_before)),
            )

        rows = self._claim_for_requeue(condition, limit)
        return [(row["id"], row["attempt"], row["heartbeat_at"] is None) for row in rows]

    def _claim_for_requeue(
        self, condition: Callable[[Any], tuple[ColumnElement[bool], ...]], limit: int,
        **values: Any,
    ) -> Sequence[RowMapping]:
        """Stamp updated_at (and `values`) on up to `limit` agents meeting `condition`
        (of a table or its alias), in one statement; the rows it stamped.

        Sweepers race: on PostgreSQL the candidates are locked SKIP LOCKED (a row
        another sweeper holds is its own) and the condition is tested again on the
        row as locked, so a row another sweeper stamped meanwhile no longer meets it.
        SQLite runs one writer at a time.
        """
        candidate = agents.alias("candidate")
        mine = (
            select(candidate.c.id)
            .where(*condition(candidate))
            .order_by(candidate.c.updated_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        statement = (
            update(agents)
            .where(agents.c.id.in_(mine), *condition(agents))
            .values(updated_at=utcnow(), **values)
            .returning(agents.c.id, agents.c.attempt, agents.c.task_id, agents.c.heartbeat_at)
        )
        with self._one_statement() as conn:
            return conn.execute(statement).mappings().all()
