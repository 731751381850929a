"""The one door to the database: agents, steps and users, with compare-and-set writes.

Every status change is a single `UPDATE … WHERE id = :id AND status = :expected`
whose row count says whether it won. Every step write first takes the agent's row
lock where it is RUNNING under the writer's attempt, in the same transaction: the
lock orders it against a concurrent cancellation, so once a cancellation has
committed, no later step of the agent can be written. On PostgreSQL the step writes
of a worker's agents that arrive while another is out share the next statement and
commit (store/group_commit.py).

On PostgreSQL a statement that stands alone runs in autocommit, and the statements
run on every step or request are prebuilt SQL on a psycopg2 cursor: see postgres.py.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    Executable,
    String,
    and_,
    case,
    cast,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import Conflict, RateLimited, RequestError, StaleAttempt
from jarvis_agents.lifecycle import (
    ACTIVE,
    Agent,
    AgentMode,
    AgentStatus,
    Step,
    StepType,
    StopReason,
    Usage,
    check_transition,
    utcnow,
)
from jarvis_agents.store.group_commit import GroupCommit
from jarvis_agents.store.models import AS_READ, AgentRow, StepRow, UserRow
from jarvis_agents.store.models import as_utc as _aware
from jarvis_agents.store.outbox import EVENTS, OutboxStore, owe
from jarvis_agents.store.postgres import PostgresStatements, StepWrite
from jarvis_agents.store.users import User, Users

agents = AgentRow.__table__
steps_table = StepRow.__table__
# What every read of an agent selects: its columns, with step_count as read.
AGENT_READ = tuple(
    literal_column(AS_READ[column.name]).label(column.name) if column.name in AS_READ else column
    for column in agents.c
)
users = UserRow.__table__

class Repository:
    """Agents, steps and users over one SQLAlchemy engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pg = PostgresStatements(engine) if engine.dialect.name == "postgresql" else None
        # For writes that stand alone: autocommit on PostgreSQL, a transaction around
        # them on SQLite. Reads go through _read.
        self._one_statement = self._pg.connection if self._pg is not None else engine.begin
        self.outbox = OutboxStore(engine, self._one_statement)
        # Step writes made while another is out share the next statement and commit.
        self._step_writes: GroupCommit[StepWrite, bool] | None = None
        if (pg := self._pg) is not None:
            self._step_writes = GroupCommit(
                lambda write: pg.append_steps(*write), pg.append_steps_of_many
            )
        self.users = Users(read=self._read, one_statement=self._one_statement)

    # --- users (store/users.py) -------------------------------------------------------

    def create_user(self, name: str) -> tuple[User, str]:
        """Create a user and return it with its API key (shown once, stored hashed)."""
        return self.users.create(name)

    def user_by_api_key(self, api_key: str) -> User | None:
        return self.users.by_api_key(api_key)

    def user_by_name(self, name: str) -> User | None:
        return self.users.by_name(name)

    # --- agents --------------------------------------------------------------------

    def create_agent(self, agent: Agent, *, max_active: int | None = None) -> tuple[Agent, bool]:
        """Insert a PENDING agent; returns (agent, created).

        With an idempotency key already used by this user, returns the earlier agent
        (created=False) when the request hash matches, or raises Conflict. Raises
        RateLimited when the user already has `max_active` agents PENDING or RUNNING.
        """
        earlier: Mapping[str, Any] | None
        try:
            if self._pg is not None:
                earlier, limited = self._pg.create_agent(
                    _agent_values(agent), max_active=max_active
                )
            else:
                earlier, limited = self._create_agent(agent, max_active=max_active)
        except IntegrityError:
            # Lost a race on the same idempotency key: the winner's agent is the answer.
            with self._one_statement() as conn:
                earlier, limited = self._by_idempotency_key(conn, agent), False
            if earlier is None:
                raise
        if earlier is not None:
            if earlier["request_hash"] != agent.request_hash:
                raise Conflict(
                    "this Idempotency-Key was already used with a different request body",
                    code="idempotency_key_reused",
                )
            return _agent(earlier), False
        if limited:  # the count stopped at max_active: that is how many the user has
            raise RateLimited(
                f"you already have {max_active} agents pending or running "
                f"(the limit is {max_active}); wait for some to finish"
            )
        return agent, True

    def _create_agent(
        self, agent: Agent, *, max_active: int | None
    ) -> tuple[RowMapping | None, bool]:
        """The portable create_agent: (the earlier agent's row, whether the limit refused it)."""
        with self.engine.begin() as conn:
            earlier = self._by_idempotency_key(conn, agent)
            if earlier is not None:
                return earlier, False
            if max_active is not None:
                # Lock the user row so concurrent creates count one after another.
                conn.execute(
                    select(users.c.id).where(users.c.id == agent.user_id).with_for_update()
                )
                # Count at most `max_active` rows: the answer is only "under the
                # limit or not", and a user with a big backlog must not slow creates.
                active_rows = (
                    select(agents.c.id).where(
                        agents.c.user_id == agent.user_id,
                        agents.c.status.in_([s.value for s in ACTIVE]),
                    ).limit(max_active).subquery()
                )
                active = conn.execute(select(func.count()).select_from(active_rows)).scalar_one()
                if active >= max_active:
                    return None, True
            conn.execute(insert(agents).values(**_agent_values(agent)))
        return None, False

    def _by_idempotency_key(self, conn: Connection, agent: Agent) -> RowMapping | None:
        if agent.idempotency_key is None:
            return None
        return conn.execute(
            select(*AGENT_READ).where(
                agents.c.user_id == agent.user_id,
                agents.c.idempotency_key == agent.idempotency_key,
            )
        ).mappings().first()

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None:
        if self._pg is not None:
            row = self._pg.agent(agent_id, user_id=user_id)
        else:
            query = select(*AGENT_READ).where(agents.c.id == agent_id)
            if user_id is not None:
                query = query.where(agents.c.user_id == user_id)
            rows = self._read(query)
            row = rows[0] if rows else None
        return _agent(row) if row else None

    def get_many(self, agent_ids: Sequence[uuid.UUID]) -> list[Agent]:
        """These agents, in no particular order (one that does not exist is left out)."""
        return [_agent(row) for row in self._read(
            select(*AGENT_READ).where(agents.c.id.in_(agent_ids)))] if agent_ids else []

    def list_agents(
        self,
        user_id: uuid.UUID,
        *,
        status: AgentStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        thread_id: uuid.UUID | None = None,
    ) -> tuple[list[Agent], str | None]:
        """The user's agents, newest first, and the cursor of the next page (or None)."""
        query = select(*AGENT_READ).where(agents.c.user_id == user_id)
        if thread_id is not None:
            query = query.where(agents.c.thread_id == thread_id)
        if status is not None:
            query = query.where(agents.c.status == status.value)
        if cursor is not None:
            created_at, last_id = decode_cursor(cursor)
            query = query.where(
                or_(
                    agents.c.created_at < created_at,
                    and_(agents.c.created_at == created_at, agents.c.id < last_id),
                )
            )
        query = query.order_by(agents.c.created_at.desc(), agents.c.id.desc()).limit(limit + 1)
        rows = self._read(query)
        page = [_agent(row) for row in rows[:limit]]
        more = len(rows) > limit
        return page, (encode_cursor(page[-1]) if more and page else None)

    # --- lifecycle -----------------------------------------------------------------

    def transition(
        self,
        agent_id: uuid.UUID,
        expected: AgentStatus,
        new: AgentStatus,
        *,
        attempt: int | None = None,
        heartbeat_before: datetime | None = None,
        steps: Sequence[Step] = (),
        **fields: Any,
    ) -> bool:
        """Compare-and-set the status; True when this call won.

        With `attempt`, only that execution attempt may make the change; with
        `heartbeat_before`, only while its heartbeat is older than that (a worker
        lost: not one alive, nor an attempt handed back, whose heartbeat is NULL).
        `steps` are written in the same transaction, only if the change won; so is the
        webhook delivery a change to a terminal status owes an agent with a webhook_url.
        """
        check_transition(expected, new)
        now = fields.pop("now", None) or utcnow()
        values: dict[str, Any] = {"status": new.value, "updated_at": now, **fields}
        if new.is_terminal:
            values.setdefault("completed_at", now)
        if isinstance(values.get("stop_reason"), StopReason):
            values["stop_reason"] = values["stop_reason"].value
        owes = EVENTS.get(new)
        if (steps or owes) and self._pg is not None:  # one statement, one round trip
            return self._pg.transition(
                agent_id, expected, values, attempt=attempt,
                heartbeat_before=heartbeat_before, steps=steps, owes=owes)
        condition = [agents.c.id == agent_id, agents.c.status == expected.value]
        if attempt is not None:
            condition.append(agents.c.attempt == attempt)
        if heartbeat_before is not None:
            condition.append(agents.c.heartbeat_at < heartbeat_before)
        statement = update(agents).where(*condition).values(**values)
        with (self.engine.begin() if steps or owes else self._one_statement()) as conn:
            won = conn.execute(statement).rowcount == 1
            if won and owes:
                conn.execute(owe(agent_id, owes, now))
            if won and steps:
                conn.execute(insert(steps_table), _step_values(agent_id, attempt or 0, steps))
        return won

    def claim(
        self, agent_id: uuid.UUID, *, task_id: str | None = None, now: datetime | None = None
    ) -> Agent | None:
        """PENDING → RUNNING under a new attempt; None when someone else got there first.

        `now` becomes its started_at (if first), heartbeat_at and updated_at.
        """
        now = now or utcnow()
        if self._pg is not None:
            claimed = self._pg.claim(agent_id, task_id=task_id, now=now)
            return _agent(claimed) if claimed else None
        with self._one_statement() as conn:
            row = conn.execute(
                update(agents)
                .where(agents.c.id == agent_id, agents.c.status == AgentStatus.PENDING.value)
                .values(
                    status=AgentStatus.RUNNING.value, attempt=agents.c.attempt + 1,
                    started_at=func.coalesce(agents.c.started_at, now), heartbeat_at=now,
                    updated_at=now, task_id=task_id,
                )
                .returning(*AGENT_READ)
            ).mappings().first()
        return _agent(row) if row else None

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
                    agents.c.id == agent_id,
                    agents.c.status == AgentStatus.RUNNING.value,
                    agents.c.attempt == attempt,
                    or_(agents.c.heartbeat_at.is_(None), agents.c.heartbeat_at < stale_before),
                )
                .values(
                    attempt=attempt + 1, heartbeat_at=now, updated_at=now, task_id=task_id,
                    # A hand-back (release) left heartbeat_at NULL: not a loss.
                    losses=agents.c.losses + case((agents.c.heartbeat_at.is_(None), 0), else_=1),
                )
                .returning(*AGENT_READ)
            ).mappings().first()
        return _agent(row) if row else None

    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None:
        """Persist one iteration's steps in one transaction, or raise StaleAttempt.

        The guard is what refuses the write: it matches no row unless the agent is
        RUNNING under this attempt, and it holds the row lock until commit.
        `step_count` is the agent's count with these steps: SQLite's guard, an UPDATE,
        stores it; PostgreSQL's only locks the row (see store/postgres.py), and the
        count is read from the steps (models.STEP_COUNT_AS_READ).
        """
        if self._step_writes is not None:
            owned = self._step_writes.write((agent_id, attempt, steps))
        else:
            owned = self._append_steps(agent_id, attempt, steps, step_count=step_count)
        if not owned:
            raise StaleAttempt(f"agent {agent_id} is no longer RUNNING under attempt {attempt}")

    def _append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> bool:
        now = utcnow()
        with self.engine.begin() as conn:
            owned = conn.execute(
                update(agents)
                .where(
                    agents.c.id == agent_id,
                    agents.c.status == AgentStatus.RUNNING.value,
                    agents.c.attempt == attempt,
                )
                .values(step_count=step_count, heartbeat_at=now, updated_at=now)
            ).rowcount == 1
            if owned:
                conn.execute(insert(steps_table), _step_values(agent_id, attempt, steps))
        return owned

    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None:
        """Record the mode an agent `auto` runs in, once its attempt has chosen it."""
        with self._one_statement() as conn:
            conn.execute(
                update(agents)
                .where(agents.c.id == agent_id, agents.c.status == AgentStatus.RUNNING.value,
                       agents.c.attempt == attempt, agents.c.mode != mode.value)
                .values(mode=mode.value)
            )

    def forget_task(self, agent_id: uuid.UUID) -> None:
        """Mark a PENDING agent as not on the queue, for the sweeper to enqueue later."""
        with self._one_statement() as conn:
            conn.execute(
                update(agents)
                .where(agents.c.id == agent_id, agents.c.status == AgentStatus.PENDING.value)
                .values(task_id=None)
            )

    def requeue_pending(self, *, untouched_before: datetime, limit: int = 100) -> list[tuple[uuid.UUID, str]]:
        """Claim the PENDING agents to put on the queue again: (id, task id) of each.

        Those not on it (their enqueue failed: task_id NULL) and those untouched since
        `untouched_before` (their message may have died with a worker that had
        prefetched it). Each is claimed once per period, however many sweepers run at
        once (see `_claim_for_requeue`); the task id is the one it keeps or is given.
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
        self, *, stale_before: datetime, limit: int = 100
    ) -> list[tuple[uuid.UUID, int, bool]]:
        """Claim the RUNNING agents whose attempt is gone: (id, attempt, whether it was
        handed back rather than lost) of each.

        A heartbeat older than `stale_before`, or none (handed back, which the worker
        that did it enqueues itself), and no sweep claimed it since `stale_before`
        either: one enqueue per agent per staleness period, however many sweepers run.
        """
        def condition(table: Any) -> tuple[ColumnElement[bool], ...]:
            return (
                table.c.status == AgentStatus.RUNNING.value,
                or_(table.c.heartbeat_at.is_(None), table.c.heartbeat_at < stale_before),
                table.c.updated_at < stale_before,
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

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]:
        if self._pg is not None:
            return [_step(row) for row in self._pg.steps_after(agent_id, seq)]
        rows = self._read(
            select(steps_table)
            .where(steps_table.c.agent_id == agent_id, steps_table.c.seq > seq)
            .order_by(steps_table.c.seq)
        )
        return [_step(row) for row in rows]

    def heartbeat(self, owned: Iterable[tuple[uuid.UUID, int]]) -> int:
        """Mark these (agent, attempt) executions alive; returns how many still are."""
        pairs = list(owned)
        if not pairs:
            return 0
        if self._pg is not None:
            return self._pg.heartbeat(pairs)
        with self._one_statement() as conn:
            return conn.execute(
                update(agents)
                .where(
                    agents.c.status == AgentStatus.RUNNING.value,
                    or_(*(and_(agents.c.id == i, agents.c.attempt == a) for i, a in pairs)),
                )
                .values(heartbeat_at=utcnow())
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
                .where(agents.c.id == agent_id, agents.c.status == AgentStatus.RUNNING.value,
                       agents.c.attempt == attempt)
                .values(heartbeat_at=None, updated_at=now)
            ).rowcount == 1

    def status_counts(self) -> dict[str, int]:
        rows = self._read(
            select(agents.c.status, func.count().label("n")).group_by(agents.c.status)
        )
        return {row["status"]: row["n"] for row in rows}

    def oldest_pending_created_at(self) -> datetime | None:
        (row,) = self._read(
            select(func.min(agents.c.created_at).label("oldest")).where(
                agents.c.status == AgentStatus.PENDING.value
            )
        )
        return _aware(row["oldest"]) if row["oldest"] else None

    def _read(self, statement: Executable) -> Sequence[RowMapping]:
        if self._pg is not None:
            return self._pg.read(statement)  # run again if its connection had just died
        with self.engine.connect() as conn:
            return conn.execute(statement).mappings().all()


# --- mapping -----------------------------------------------------------------------


def _agent_values(agent: Agent) -> dict[str, Any]:
    return {
        "id": agent.id, "user_id": agent.user_id, "goal": agent.goal,
        "status": agent.status.value, "model": agent.model, "max_steps": agent.max_steps,
        "step_count": agent.step_count, "final_answer": agent.final_answer,
        "error": agent.error,
        "stop_reason": agent.stop_reason.value if agent.stop_reason else None,
        "tools": list(agent.tools) if agent.tools is not None else None,
        "webhook_url": agent.webhook_url, "created_at": agent.created_at,
        "updated_at": agent.updated_at or agent.created_at, "started_at": agent.started_at,
        "completed_at": agent.completed_at, "attempt": agent.attempt, "losses": agent.losses,
        "task_id": agent.task_id,
        "heartbeat_at": agent.heartbeat_at, "idempotency_key": agent.idempotency_key,
        "request_hash": agent.request_hash,
        "approve_tools": list(agent.approve_tools) if agent.approve_tools is not None else None,
        "waiting_for": agent.waiting_for, "approval": agent.approval,
        "waited_ms": agent.waited_ms, "mode": agent.mode.value,
        "input_tokens": agent.usage.input_tokens, "output_tokens": agent.usage.output_tokens,
        "model_calls": agent.usage.model_calls, "output_schema": agent.output_schema,
        "output": agent.output,
        # Threads and forks (store/threads.py): a thread's id is its first agent's.
        "thread_id": agent.thread_id or agent.id, "parent_id": agent.parent_id,
        "forked_from_id": agent.forked_from_id, "forked_from_seq": agent.forked_from_seq,
        "context": agent.context, "traceparent": agent.traceparent,
    }


def _agent(row: Mapping[str, Any]) -> Agent:
    return Agent(
        id=row["id"], user_id=row["user_id"], goal=row["goal"],
        model=row["model"], max_steps=row["max_steps"], status=AgentStatus(row["status"]),
        step_count=row["step_count"], final_answer=row["final_answer"], error=row["error"],
        stop_reason=StopReason(row["stop_reason"]) if row["stop_reason"] else None,
        tools=tuple(row["tools"]) if row["tools"] is not None else None,
        webhook_url=row["webhook_url"], created_at=_aware(row["created_at"]),
        updated_at=_aware(row["updated_at"]), started_at=_aware(row["started_at"]),
        completed_at=_aware(row["completed_at"]), attempt=row["attempt"],
        losses=row["losses"], task_id=row["task_id"], heartbeat_at=_aware(row["heartbeat_at"]),
        idempotency_key=row["idempotency_key"], request_hash=row["request_hash"],
        approve_tools=tuple(row["approve_tools"]) if row["approve_tools"] is not None else None,
        waiting_for=_json(row["waiting_for"]), approval=_json(row["approval"]),
        waited_ms=row["waited_ms"] or 0,
        mode=AgentMode(row["mode"]),
        usage=Usage(int(row["input_tokens"]), int(row["output_tokens"]), int(row["model_calls"])),
        output_schema=row["output_schema"], output=row["output"],
        thread_id=row.get("thread_id"), parent_id=row.get("parent_id"),
        forked_from_id=row.get("forked_from_id"), forked_from_seq=row.get("forked_from_seq"),
        context=row.get("context"),
        traceparent=row["traceparent"],
    )


def _json(value: Any) -> Any:
    """A JSON column as read: psycopg2's raw cursor (store/postgres.py) hands back text."""
    return json.loads(value) if isinstance(value, str) else value


def _step_values(agent_id: uuid.UUID, attempt: int, steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "agent_id": agent_id, "seq": s.seq, "step": s.step, "type": s.type.value,
            "tool": s.tool, "content": s.content, "created_at": s.created_at,
            "duration_ms": s.duration_ms, "attempt": attempt, "call_id": s.call_id,
            "input_tokens": s.usage.input_tokens if s.usage else None,
            "output_tokens": s.usage.output_tokens if s.usage else None,
        }
        for s in steps
    ]


def _step(row: RowMapping) -> Step:
    return Step(
        seq=row["seq"], step=row["step"], type=StepType(row["type"]), tool=row["tool"],
        content=row["content"], created_at=_aware(row["created_at"]),
        duration_ms=row["duration_ms"], call_id=row["call_id"],
        usage=None if row["input_tokens"] is None else Usage(
            row["input_tokens"], row["output_tokens"] or 0, 1),
    )


def encode_cursor(agent: Agent) -> str:
    raw = json.dumps([agent.created_at.isoformat(), str(agent.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# `encode_cursor` writes ~110 characters. Past this, a cursor is not one of ours,
# and nothing of its length reaches the JSON parser (whose nesting depth it bounds).
MAX_CURSOR_CHARS = 256


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Parse a cursor from `encode_cursor`; anything else is a RequestError."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, agent_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
        return (when if when.tzinfo else when.replace(tzinfo=UTC)), uuid.UUID(agent_id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise RequestError("the cursor is malformed; pass back `next_cursor` unchanged",
                           code="invalid_cursor") from None
