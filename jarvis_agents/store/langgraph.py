"""LangGraph's threads and runs in SQL (README, LangGraph SDK), beside the agents.

A thread is a thread of agents (store/threads.py), or a row of `langgraph_threads`
made by `threads.create` before its first run; a listing is the union of both. The runs
that are not an agent of their own are rows of `langgraph_runs` (langgraph_tables.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, insert, literal, select, union_all, update

from jarvis_agents.lifecycle import utcnow
from jarvis_agents.store.langgraph_tables import LangGraphRunRow, LangGraphThreadRow
from jarvis_agents.store.models import AgentRow, as_utc

threads = LangGraphThreadRow.__table__
runs = LangGraphRunRow.__table__
agents = AgentRow.__table__

QUEUED, RESUME, CANCELLED = "queued", "resume", "cancelled"


@dataclass(frozen=True)
class ThreadRow:
    """A thread as listed: its id, when it began and last changed, its metadata."""

    id: uuid.UUID
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRow:
    """A run that is not an agent of its own (langgraph_tables.LangGraphRunRow)."""

    id: uuid.UUID
    user_id: uuid.UUID
    thread_id: uuid.UUID
    kind: str
    created_at: datetime
    agent_id: uuid.UUID | None = None
    goal: str | None = None
    assistant: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    multitask_strategy: str = "reject"
    after_seq: int = 0


def _run(row: Any) -> RunRow:
    return RunRow(id=row["id"], user_id=row["user_id"], thread_id=row["thread_id"],
                  kind=row["kind"], created_at=as_utc(row["created_at"]) or utcnow(),
                  agent_id=row["agent_id"], goal=row["goal"], assistant=row["assistant"],
                  metadata=row["metadata"] or {}, multitask_strategy=row["multitask_strategy"],
                  after_seq=row["after_seq"])


class LangGraphStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- threads ------------------------------------------------------------------------

    def add_thread(self, user_id: uuid.UUID, thread_id: uuid.UUID,
                   metadata: dict[str, Any]) -> ThreadRow:
        now = utcnow()
        with self.engine.begin() as conn:
            conn.execute(insert(threads).values(id=thread_id, user_id=user_id, metadata=metadata,
                                                created_at=now))
        return ThreadRow(thread_id, now, now, metadata)

    def thread(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> ThreadRow | None:
        """The user's thread: made by threads.create, or by its agents; None for another's."""
        found = self.threads(user_id, ids=[thread_id], limit=1, offset=0)
        return found[0] if found else None

    def threads(self, user_id: uuid.UUID, *, ids: list[uuid.UUID] | None = None,
                limit: int, offset: int) -> list[ThreadRow]:
        """The user's threads, the one changed last first."""
        of_agents = (
            select(agents.c.thread_id.label("id"), func.min(agents.c.created_at).label("created_at"),
                   func.max(agents.c.updated_at).label("updated_at"))
            .where(agents.c.user_id == user_id)
            .group_by(agents.c.thread_id))
        made = (
            select(threads.c.id, threads.c.created_at, threads.c.created_at.label("updated_at"))
            .where(threads.c.user_id == user_id,
                   ~select(literal(1)).where(agents.c.thread_id == threads.c.id).exists()))
        if ids is not None:
            of_agents = of_agents.where(agents.c.thread_id.in_(ids))
            made = made.where(threads.c.id.in_(ids))
        listed = union_all(of_agents, made).subquery()
        query = (select(listed).order_by(listed.c.updated_at.desc(), listed.c.id.desc())
                 .limit(limit).offset(offset))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
            found = [row["id"] for row in rows]
            metadata = dict(conn.execute(
                select(threads.c.id, threads.c.metadata).where(threads.c.id.in_(found))).all()
            ) if found else {}
        return [ThreadRow(row["id"], as_utc(row["created_at"]) or utcnow(),
                          as_utc(row["updated_at"]) or utcnow(), metadata.get(row["id"]) or {})
                for row in rows]

    def with_metadata(self, user_id: uuid.UUID, wanted: dict[str, Any]) -> list[uuid.UUID]:
        """The ids of the user's threads whose metadata holds every pair of `wanted`."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(threads.c.id, threads.c.metadata)
                                .where(threads.c.user_id == user_id)).all()
        return [thread_id for thread_id, metadata in rows
                if all((metadata or {}).get(k) == v for k, v in wanted.items())]

    # --- runs that are not an agent of their own ---------------------------------------

    def add_run(self, run: RunRow) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(runs).values(
                id=run.id, user_id=run.user_id, thread_id=run.thread_id, kind=run.kind,
                agent_id=run.agent_id, goal=run.goal, assistant=run.assistant,
                metadata=run.metadata, multitask_strategy=run.multitask_strategy,
                after_seq=run.after_seq, created_at=run.created_at))

    def run(self, user_id: uuid.UUID, run_id: uuid.UUID) -> RunRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id, runs.c.user_id == user_id)
                               ).mappings().first()
        return _run(row) if row else None

    def runs_of_thread(self, thread_id: uuid.UUID, *, kind: str | None = None) -> list[RunRow]:
        """The thread's runs of that kind, oldest first (a queue in arrival order)."""
        query = select(runs).where(runs.c.thread_id == thread_id)
        if kind is not None:
            query = query.where(runs.c.kind == kind)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(runs.c.created_at, runs.c.id)).mappings().all()
        return [_run(row) for row in rows]

    def queued_threads(self, *, limit: int = 100) -> list[uuid.UUID]:
        """Threads with runs waiting their turn, the longest waiting first."""
        query = (select(runs.c.thread_id, func.min(runs.c.created_at).label("since"))
                 .where(runs.c.kind == QUEUED).group_by(runs.c.thread_id)
                 .order_by("since").limit(limit))
        with self.engine.connect() as conn:
            return [row[0] for row in conn.execute(query).all()]

    def started(self, run_id: uuid.UUID) -> bool:
        """A queued run whose agent now exists leaves the queue; False if it had left."""
        with self.engine.begin() as conn:
            return conn.execute(delete(runs).where(runs.c.id == run_id, runs.c.kind == QUEUED)
                                ).rowcount == 1

    def drop_run(self, run_id: uuid.UUID) -> bool:
        """A queued run cancelled (or found unable to start) before its turn: it stays
        readable, as cancelled; False if it had started or left meanwhile."""
        with self.engine.begin() as conn:
            return conn.execute(update(runs).where(runs.c.id == run_id, runs.c.kind == QUEUED)
                                .values(kind=CANCELLED)).rowcount == 1
