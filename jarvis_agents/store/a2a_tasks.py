"""A user's agents as A2A's ListTasks pages them (README, A2A): most recently updated
first, filtered by thread, status and update time, with the count of all that match."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, and_, func, or_, select

from jarvis_agents.lifecycle import Agent, AgentStatus
from jarvis_agents.store.models import AgentRow
from jarvis_agents.store.rows import AGENT_READ, agent_from_row, decode_cursor

agents = AgentRow.__table__


@dataclass(frozen=True)
class TaskPage:
    agents: list[Agent]
    next_token: str  # "" on the last page
    total: int  # every agent that matches, on all pages


def page_token(agent: Agent) -> str:
    """Where the next page starts: after this agent (the format of rows.encode_cursor,
    keyed by the update time; rows.decode_cursor reads it)."""
    when = agent.updated_at or agent.created_at
    raw = json.dumps([when.isoformat(), str(agent.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class TaskListing:
    """ListTasks over the repository's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def page(
        self, user_id: uuid.UUID, *, limit: int, token: str | None = None,
        status: AgentStatus | None = None, thread_id: uuid.UUID | None = None,
        updated_after: datetime | None = None,
    ) -> TaskPage:
        """One page of the user's agents; a malformed `token` is a RequestError."""
        conditions = [agents.c.user_id == user_id]
        if thread_id is not None:
            conditions.append(agents.c.thread_id == thread_id)
        if status is not None:
            conditions.append(agents.c.status == status.value)
        if updated_after is not None:
            conditions.append(agents.c.updated_at > updated_after)
        after = decode_cursor(token) if token else None
        query = select(*AGENT_READ).where(*conditions)
        if after is not None:
            when, last_id = after
            query = query.where(or_(agents.c.updated_at < when,
                                    and_(agents.c.updated_at == when, agents.c.id < last_id)))
        query = query.order_by(agents.c.updated_at.desc(), agents.c.id.desc()).limit(limit + 1)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
            total = conn.execute(select(func.count()).select_from(agents).where(*conditions)).scalar()
        page = [agent_from_row(row) for row in rows[:limit]]
        more = len(rows) > limit
        return TaskPage(page, page_token(page[-1]) if more and page else "", int(total or 0))
