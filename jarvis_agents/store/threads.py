"""Threads and forks in SQL (docs/api.md §8), over the repository's tables and engine.

One agent of a thread at a time is the database's rule (the partial unique index
`uq_agents_one_active_per_thread`): two creates racing into one thread leave one
winner, and the loser's IntegrityError is told apart here. A fork's agent row and
the copies of its steps are inserted in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from jarvis_agents.lifecycle import Agent, AgentStatus, Step
from jarvis_agents.store.active_limit import at_active_limit, too_many_active
from jarvis_agents.store.models import AgentRow, StepRow
from jarvis_agents.store.rows import agent_values, step_values
from jarvis_agents.threads import Earlier

agents = AgentRow.__table__
steps_table = StepRow.__table__

ONE_ACTIVE_INDEX = "uq_agents_one_active_per_thread"


def is_thread_taken(exc: IntegrityError) -> bool:
    """Whether a refused insert lost to another agent active in the same thread."""
    text = str(exc.orig)
    # PostgreSQL names the index; SQLite names the column of a unique index it broke.
    return ONE_ACTIVE_INDEX in text or "agents.thread_id" in text


class ThreadStore:
    """The reads and writes of threads and forks."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def agents_of_thread(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> list[Earlier]:
        """The user's agents of the thread, oldest first; [] for an unknown or another
        user's thread."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(agents.c.id, agents.c.status, agents.c.goal, agents.c.final_answer,
                       agents.c.error, agents.c.idempotency_key)
                .where(agents.c.user_id == user_id, agents.c.thread_id == thread_id)
                .order_by(agents.c.created_at, agents.c.id)
            ).mappings().all()
        return [Earlier(**{**row, "status": AgentStatus(row["status"])}) for row in rows]

    def insert_fork(self, agent: Agent, steps: Sequence[Step], *, max_active: int | None) -> None:
        """Insert the PENDING fork and its copied steps in one transaction; RateLimited
        when the user already has `max_active` agents PENDING or RUNNING."""
        with self.engine.begin() as conn:
            if max_active is not None and at_active_limit(conn, agent.user_id, max_active):
                raise too_many_active(max_active)
            conn.execute(insert(agents).values(**agent_values(agent)))
            if steps:
                # Attempt 0: written by no execution; the fork's first claim is attempt 1.
                conn.execute(insert(steps_table), step_values(agent.id, 0, steps))
