"""Schedules in SQL (jarvis_agents/schedules.py says what they are), on SQLite and
PostgreSQL alike: `repository.schedules`.

A due time fires once however many workers look (README, Schedules): a firing is one
transaction that takes a batch of due schedules (on PostgreSQL `FOR UPDATE SKIP
LOCKED`: two workers take two different batches instead of queueing on one), moves each
one's `next_run_at` with a compare-and-set on the due time it read, and inserts the
agents of the schedules whose compare-and-set won. An agent carries its schedule and
due time, which a unique index of `agents` also keeps to one. A worker that dies before
the commit fires nothing, and the due time is still there for the next to take.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Engine,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    Uuid,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from jarvis_agents.errors import RateLimited
from jarvis_agents.lifecycle import TERMINAL
from jarvis_agents.schedules import Decide, Firing, Schedule, Template
from jarvis_agents.store.connections import Connections
from jarvis_agents.store.models import AgentRow, Base, UserRow, as_utc
from jarvis_agents.store.rows import agent_values

ENABLED_SQL = "enabled"


class ScheduleRow(Base):
    """A user's schedule (migration 0018): its cron, zone and template, and where it is."""

    __tablename__ = "schedules"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    goal: Mapped[str] = mapped_column(Text)
    cron: Mapped[str] = mapped_column(String(200))
    timezone: Mapped[str] = mapped_column(String(64))
    # The agent each due time makes: its assistant and create fields (schedules.Template).
    template: Mapped[dict[str, Any]] = mapped_column(JSON)
    thread: Mapped[str] = mapped_column(String(8))
    thread_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    overlap: Mapped[str] = mapped_column(String(8))
    enabled: Mapped[bool] = mapped_column(Boolean)
    next_run_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_agent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("thread IN ('new', 'same')", name="thread_known"),
        CheckConstraint("overlap IN ('skip', 'allow')", name="overlap_known"),
        CheckConstraint("skipped >= 0", name="skipped_not_negative"),
        # What the firing loop reads: only the enabled schedules, by due time.
        Index("ix_schedules_due", "next_run_at",
              postgresql_where=text(ENABLED_SQL), sqlite_where=text(ENABLED_SQL)),
    )


schedules = ScheduleRow.__table__
agents = AgentRow.__table__
users = UserRow.__table__
TERMINAL_STATUSES = [status.value for status in TERMINAL]

# The due schedules with their last agent's status (NULL: it has none, or it is gone).
_LAST_STATUS = (select(agents.c.status).where(agents.c.id == schedules.c.last_agent_id)
                .scalar_subquery().label("last_status"))


# A schedule's latest agent: the one of its latest due time (the unique index's probe).
_LAST_AGENT = (select(agents.c.id).where(agents.c.schedule_id == schedules.c.id)
               .order_by(agents.c.scheduled_for.desc()).limit(1).scalar_subquery())


class ScheduleRows:
    """The `schedules` table; every statement a user asks for scoped to that user."""

    def __init__(self, engine: Engine, connections: Connections) -> None:
        self._engine = engine
        self._connections = connections

    def insert(self, schedule: Schedule, *, max_per_user: int) -> None:
        with self._engine.begin() as conn:
            # Two creates of one user queue up on the user's row: the second counts the first.
            conn.execute(select(users.c.id).where(users.c.id == schedule.user_id).with_for_update())
            held = conn.execute(select(func.count()).select_from(schedules).where(
                schedules.c.user_id == schedule.user_id)).scalar_one()
            if held >= max_per_user:
                raise RateLimited(f"you already have {held} schedules (the limit is "
                                  f"{max_per_user}); delete one first", code="too_many_schedules")
            conn.execute(insert(schedules).values(**_values(schedule)))

    def find(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> Schedule | None:
        rows = self._connections.read(select(schedules).where(
            schedules.c.id == schedule_id, schedules.c.user_id == user_id))
        return _schedule(rows[0]) if rows else None

    def of_user(self, user_id: uuid.UUID) -> list[Schedule]:
        rows = self._connections.read(select(schedules).where(schedules.c.user_id == user_id)
                                      .order_by(schedules.c.created_at, schedules.c.id))
        return [_schedule(row) for row in rows]

    def change(self, user_id: uuid.UUID, schedule_id: uuid.UUID, **values: Any) -> Schedule | None:
        if "template" in values:
            values["template"] = values["template"].stored()
        with self._engine.begin() as conn:
            row = conn.execute(
                update(schedules)
                .where(schedules.c.id == schedule_id, schedules.c.user_id == user_id)
                .values(**values).returning(*schedules.c)
            ).mappings().first()
        return _schedule(row) if row is not None else None

    def delete(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> bool:
        with self._engine.begin() as conn:
            return conn.execute(delete(schedules).where(
                schedules.c.id == schedule_id, schedules.c.user_id == user_id)).rowcount == 1

    def fire_due(self, now: datetime, *, limit: int, decide: Decide) -> Sequence[Firing]:
        try:
            return self._fire_batch(now, limit=limit, decide=decide)
        except IntegrityError:
            # An agent of the batch broke a rule (its thread taken meanwhile): each on its
            # own, so that one refused agent holds up no other schedule.
            return self._fire_each(now, limit=limit, decide=decide)

    def _fire_batch(self, now: datetime, *, limit: int, decide: Decide) -> list[Firing]:
        with self._engine.begin() as conn:
            batch = [(decide(_schedule(row), _ended(row), now), row["next_run_at"])
                     for row in _due(conn, now, limit)]
            won = _all_moved(conn, batch, now)
            made = [f.agent for f in won if f.agent is not None]
            if made:
                conn.execute(insert(agents), [agent_values(agent) for agent in made])
                conn.execute(update(schedules).where(schedules.c.id.in_(
                    [agent.schedule_id for agent in made])).values(last_agent_id=_LAST_AGENT))
        return won

    def _fire_each(self, now: datetime, *, limit: int, decide: Decide) -> list[Firing]:
        """The batch's firings each in a transaction of its own: an agent refused, its
        due time passes as skipped."""
        with self._engine.begin() as conn:
            due = _due(conn, now, limit)
        won: list[Firing] = []
        for row in due:
            firing = decide(_schedule(row), _ended(row), now)
            try:
                with self._engine.begin() as conn:
                    if not _moved(conn, firing, row["next_run_at"], now):
                        continue
                    if firing.agent is not None:
                        conn.execute(insert(agents).values(**agent_values(firing.agent)))
                won.append(firing)
            except IntegrityError:
                skipped = replace(firing, agent=None, thread_id=firing.schedule.thread_id)
                with self._engine.begin() as conn:
                    if _moved(conn, skipped, row["next_run_at"], now):
                        won.append(skipped)
        return won


def _due(conn: Connection, now: datetime, limit: int) -> Sequence[RowMapping]:
    """Up to `limit` enabled schedules due at `now`, locked, that no other firing holds."""
    return conn.execute(
        select(schedules, _LAST_STATUS)
        .where(schedules.c.enabled, schedules.c.next_run_at <= now)
        .order_by(schedules.c.next_run_at).limit(limit)
        .with_for_update(of=schedules, skip_locked=True)
    ).mappings().all()


def _ended(row: RowMapping) -> bool:
    """Whether the schedule's last agent has ended (True when it has none, or it is gone)."""
    return row["last_status"] is None or row["last_status"] in TERMINAL_STATUSES


def _all_moved(conn: Connection, batch: Sequence[tuple[Firing, datetime]],
               now: datetime) -> list[Firing]:
    """The compare-and-sets of a batch, the firings that won them: one statement for all
    the schedules that read the same due time and move to the same next one (most of a
    batch, as schedules share their crons), each saying which rows it moved."""
    groups: dict[tuple[datetime, datetime], list[uuid.UUID]] = {}
    for firing, read_due in batch:
        groups.setdefault((read_due, firing.next_run_at), []).append(firing.schedule.id)
    moved: set[uuid.UUID] = set()
    for (read_due, next_run_at), ids in groups.items():
        moved.update(conn.execute(
            update(schedules)
            .where(schedules.c.id.in_(ids), schedules.c.next_run_at == read_due, schedules.c.enabled)
            .values(next_run_at=next_run_at, updated_at=now).returning(schedules.c.id)
        ).scalars())
    won = [firing for firing, _ in batch if firing.schedule.id in moved]
    skipped = [firing.schedule.id for firing in won if firing.agent is None]
    if skipped:
        conn.execute(update(schedules).where(schedules.c.id.in_(skipped))
                     .values(skipped=schedules.c.skipped + 1))
    for firing in won:
        if firing.thread_id != firing.schedule.thread_id:  # a `same` thread's first run
            conn.execute(update(schedules).where(schedules.c.id == firing.schedule.id)
                         .values(thread_id=firing.thread_id))
    return won


def _moved(conn: Connection, firing: Firing, read_due: datetime, now: datetime) -> bool:
    """The compare-and-set on the due time: True when this firing won it."""
    agent = firing.agent
    changes: dict[str, Any] = {"next_run_at": firing.next_run_at, "updated_at": now,
                               "thread_id": firing.thread_id}
    if agent is None:
        changes["skipped"] = schedules.c.skipped + 1
    else:
        changes["last_agent_id"] = agent.id
    result = conn.execute(update(schedules).where(
        schedules.c.id == firing.schedule.id, schedules.c.next_run_at == read_due,
        schedules.c.enabled).values(**changes))
    return bool(result.rowcount == 1)


def _values(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.id, "user_id": schedule.user_id, "goal": schedule.goal,
        "cron": schedule.cron, "timezone": schedule.timezone,
        "template": schedule.template.stored(), "thread": schedule.thread,
        "thread_id": schedule.thread_id, "overlap": schedule.overlap,
        "enabled": schedule.enabled, "next_run_at": schedule.next_run_at,
        "last_agent_id": schedule.last_agent_id, "skipped": schedule.skipped,
        "created_at": schedule.created_at, "updated_at": schedule.updated_at,
    }


def _schedule(row: RowMapping) -> Schedule:
    return Schedule(
        id=row["id"], user_id=row["user_id"], goal=row["goal"], cron=row["cron"],
        timezone=row["timezone"], template=Template.from_stored(row["template"] or {}),
        next_run_at=as_utc(row["next_run_at"]), thread=row["thread"],  # type: ignore[arg-type]
        overlap=row["overlap"], enabled=bool(row["enabled"]), thread_id=row["thread_id"],
        last_agent_id=row["last_agent_id"], skipped=row["skipped"],
        created_at=as_utc(row["created_at"]),  # type: ignore[arg-type]
        updated_at=as_utc(row["updated_at"]),  # type: ignore[arg-type]
    )
