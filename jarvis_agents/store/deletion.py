"""Deleting agents in SQL, with everything that belongs to them (jarvis_agents/retention.py
says when): their steps, webhook deliveries, A2A push configs and the LangGraph runs that
resumed them, then their rows.

A deletion is one short transaction. It first locks the rows of the agents it may delete
— those that have ended, as the statement finds them then, skipping any another
deletion holds (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite runs one writer at a
time) — so its rows and the check agree. No hot statement waits on these locks: steps
are written, claims made and heartbeats beaten only for agents that have not ended. A
webhook try under way for a deleted agent records its outcome on a row that is gone,
which changes nothing (store/outbox.py's updates match no row).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, and_, delete, exists, func, or_, select
from sqlalchemy.orm import aliased

from jarvis_agents.retention import Deleted, Links
from jarvis_agents.store.langgraph_tables import LangGraphRunRow, LangGraphThreadRow
from jarvis_agents.store.models import (
    A2APushConfigRow,
    AgentRow,
    AssistantRow,
    StepRow,
    UserRow,
    WebhookDeliveryRow,
    as_utc,
)
from jarvis_agents.store.schedules import ScheduleRow

agents = AgentRow.__table__
steps = StepRow.__table__
deliveries = WebhookDeliveryRow.__table__
push_configs = A2APushConfigRow.__table__
# What belongs to an agent, deleted before it, in the open rather than by ON DELETE
# CASCADE: the counts are the retention metric's.
BELONGINGS = (steps, deliveries, push_configs, LangGraphRunRow.__table__)
# The tables of what a user owns besides agents, by a `user_id` column, deleted with the
# user (their rows' own rows, an assistant's versions, go by ON DELETE CASCADE). A new
# kind of thing a user owns adds its table here.
OWNED_BY_USER = (AssistantRow.__table__, ScheduleRow.__table__, LangGraphRunRow.__table__,
                 LangGraphThreadRow.__table__)
users = UserRow.__table__

LINKS = (agents.c.id, agents.c.created_at, agents.c.completed_at, agents.c.thread_id,
         agents.c.caller_id, agents.c.forked_from_id)
ENDED = agents.c.completed_at.is_not(None)  # the schema ties it to a terminal status


def _not_depended_on(ended_before: datetime) -> ColumnElement[bool]:
    """No agent that has not ended before `ended_before` depends on the agent directly:
    a later turn of its thread, a child, its caller, a fork of it."""
    other = aliased(agents, name="dependent")
    thread = func.coalesce(agents.c.thread_id, agents.c.id)
    return ~exists().where(
        or_(other.c.completed_at.is_(None), other.c.completed_at >= ended_before),
        or_(and_(other.c.thread_id == thread, other.c.created_at > agents.c.created_at),
            other.c.caller_id == agents.c.id,
            other.c.id == agents.c.caller_id,
            other.c.forked_from_id == agents.c.id),
    )


class DeletionRows:
    """Deletions over the repository's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def delete_ended(
        self, agent_ids: Collection[uuid.UUID], *, user_id: uuid.UUID | None = None,
        ended_before: datetime | None = None,
    ) -> Deleted:
        if not agent_ids:
            return Deleted()
        condition = [agents.c.id.in_(list(agent_ids)), ENDED]
        if user_id is not None:
            condition.append(agents.c.user_id == user_id)
        if ended_before is not None:
            condition += [agents.c.completed_at < ended_before, _not_depended_on(ended_before)]
        with self.engine.begin() as conn:
            locked = list(conn.execute(
                select(agents.c.id).where(*condition).with_for_update(skip_locked=True)
            ).scalars())
            if not locked:
                return Deleted()
            counts = [conn.execute(delete(table).where(table.c.agent_id.in_(locked))).rowcount
                      for table in BELONGINGS]
            gone = conn.execute(delete(agents).where(agents.c.id.in_(locked))).rowcount
        return Deleted(agents=gone, steps=counts[0], webhook_deliveries=counts[1])

    def ended_before(
        self, cutoff: datetime, *, after: tuple[datetime, uuid.UUID] | None, limit: int,
    ) -> list[Links]:
        query = select(*LINKS).where(ENDED, agents.c.completed_at < cutoff)
        if after is not None:
            query = query.where(or_(agents.c.completed_at > after[0],
                                    and_(agents.c.completed_at == after[0], agents.c.id > after[1])))
        return self._links(query.order_by(agents.c.completed_at, agents.c.id).limit(limit))

    def linked(self, ids: Collection[uuid.UUID], threads: Collection[uuid.UUID],
               callers: Collection[uuid.UUID]) -> list[Links]:
        found = [agents.c.caller_id.in_(list(ids)), agents.c.forked_from_id.in_(list(ids)),
                 agents.c.thread_id.in_(list(threads))]
        if callers:
            found.append(agents.c.id.in_(list(callers)))
        return self._links(select(*LINKS).where(or_(*found)))

    def agents_of_user(self, user_id: uuid.UUID, *, ended: bool, limit: int) -> list[uuid.UUID]:
        with self.engine.connect() as conn:
            return list(conn.execute(
                select(agents.c.id).where(agents.c.user_id == user_id,
                                          ENDED if ended else agents.c.completed_at.is_(None))
                .limit(limit)).scalars())

    def delete_user(self, user_id: uuid.UUID) -> bool:
        """Delete the user and what they own, unless they have an agent that has not
        ended (False; nothing is deleted). Their ended agents go first (`delete_ended`):
        any left here go by ON DELETE CASCADE, in this transaction."""
        with self.engine.connect() as conn:
            for table in OWNED_BY_USER:
                conn.execute(delete(table).where(table.c.user_id == user_id))
            gone = conn.execute(delete(users).where(
                users.c.id == user_id,
                ~exists().where(agents.c.user_id == user_id, agents.c.completed_at.is_(None)),
            )).rowcount == 1
            (conn.commit if gone else conn.rollback)()
        return gone

    def _links(self, query: Select[Any]) -> list[Links]:
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [Links(row.id, as_utc(row.created_at), as_utc(row.completed_at), row.thread_id,
                      row.caller_id, row.forked_from_id) for row in rows]
