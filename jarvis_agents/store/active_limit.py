"""The per-user limit of agents PENDING or RUNNING at once (JARVIS_MAX_ACTIVE_PER_USER),
as the portable SQL path checks it, and the resume of a WAITING agent that it guards.

Every write that makes an agent active — a create (store/repository.py; on PostgreSQL
the function of migration 0002), a fork (store/threads.py), an answered approval
(here) — first locks the user's row, then counts, then writes, in one transaction:
two of them for one user queue up on the lock, and the second counts what the first
committed. A count and a write in two transactions would let concurrent ones all see
room for one more.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection, Engine, func, select, update

from jarvis_agents.errors import RateLimited
from jarvis_agents.lifecycle import ACTIVE, AgentStatus
from jarvis_agents.store.models import AgentRow, UserRow

agents = AgentRow.__table__
users = UserRow.__table__


def too_many_active(max_active: int) -> RateLimited:
    """The 429 of a create, a fork or an approval past the limit."""
    return RateLimited(
        f"you already have {max_active} agents pending or running "
        f"(the limit is {max_active}); wait for some to finish"
    )


def at_active_limit(conn: Connection, user_id: uuid.UUID, max_active: int) -> bool:
    """Lock the user's row until `conn`'s transaction ends, then say whether the user
    has `max_active` agents PENDING or RUNNING."""
    conn.execute(select(users.c.id).where(users.c.id == user_id).with_for_update())
    # Count at most `max_active` rows: the answer is only "under the limit or not",
    # and a user with a big backlog must not slow the write down.
    active_rows = (
        select(agents.c.id).where(
            agents.c.user_id == user_id,
            agents.c.status.in_([s.value for s in ACTIVE]),
        ).limit(max_active).subquery()
    )
    return conn.execute(select(func.count()).select_from(active_rows)).scalar_one() >= max_active


def resume_waiting(
    engine: Engine, agent_id: uuid.UUID, *, user_id: uuid.UUID, attempt: int,
    max_active: int | None, values: dict[str, Any],
) -> bool:
    """WAITING → PENDING with `values`, compare-and-set on the attempt that waits; False
    when it no longer waits under it. RateLimited, changing nothing, when the user
    already has `max_active` agents PENDING or RUNNING."""
    waits = (agents.c.id == agent_id, agents.c.status == AgentStatus.WAITING.value,
             agents.c.attempt == attempt)
    with engine.begin() as conn:
        if max_active is not None and at_active_limit(conn, user_id, max_active):
            # An answer that lost its race (answered, cancelled) is told so, not a 429.
            if conn.execute(select(agents.c.id).where(*waits)).first() is None:
                return False
            raise too_many_active(max_active)
        return conn.execute(update(agents).where(*waits).values(**values)).rowcount == 1
