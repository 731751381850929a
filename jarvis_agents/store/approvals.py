"""The SQL of approvals that the repository does not already have: which agents have
waited past their approval timeout (the sweeper fails them, runner.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select

from jarvis_agents.lifecycle import Agent, AgentStatus
from jarvis_agents.store.models import AgentRow
from jarvis_agents.store.repository import Repository

agents = AgentRow.__table__


def waiting_since_before(repository: Repository, cutoff: datetime, *, limit: int = 100) -> list[Agent]:
    """Agents WAITING since before `cutoff`: a WAITING agent's row changes last when it
    starts to wait (no heartbeat, no sweep touches it), so `updated_at` is that moment."""
    with repository.engine.connect() as conn:
        ids: list[uuid.UUID] = list(conn.execute(
            select(agents.c.id)
            .where(agents.c.status == AgentStatus.WAITING.value, agents.c.updated_at < cutoff)
            .order_by(agents.c.updated_at).limit(limit)
        ).scalars())
    return repository.get_many(ids)
