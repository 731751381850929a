"""The store in SQL: agents and their steps, with compare-and-set writes, on SQLite and
PostgreSQL alike (store/interface.py says what every store promises).

Every status change is a single `UPDATE … WHERE id = :id AND status = :expected`
whose row count says whether it won. Every step write first takes the agent's row
lock where it is RUNNING under the writer's attempt, in the same transaction: the
lock orders it against a concurrent cancellation, so once a cancellation has
committed, no later step of the agent can be written.

Each method is written once, here. The statements run on every step or request are
prebuilt (store/compiled.py) and run on a DBAPI cursor; on PostgreSQL a statement that
stands alone runs in autocommit (store/connections.py). store/postgres.py overrides
only what a measured gain needs there: the step writes and a transition with steps in
one statement each, and the create in one round trip.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import DateTime, Engine, and_, bindparam, case, func, insert, or_, select, update
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import Conflict, StaleAttempt
from jarvis_agents.lifecycle import (
    Agent,
    AgentMode,
    AgentStatus,
    Step,
    StopReason,
    check_transition,
    utcnow,
)
from jarvis_agents.store.active_limit import at_active_limit, resume_waiting, too_many_active
from jarvis_agents.store.assistants import AssistantRows
from jarvis_agents.store.compiled import Prebuilt
from jarvis_agents.store.connections import Connections
from jarvis_agents.store.delegation import DelegationRows
from jarvis_agents.store.deletion import DeletionRows
from jarvis_agents.store.followed import agent_with_steps
from jarvis_agents.store.models import AgentRow, StepRow
from jarvis_agents.store.outbox import EVENTS, OutboxStore
from jarvis_agents.store.recovery import Recovery, running_under
from jarvis_agents.store.rows import (
    AGENT_READ,
    STEP_COLUMNS,
    agent_from_row,
    agent_values,
    decode_cursor,
    encode_cursor,
    step_from_row,
    step_values,
)
from jarvis_agents.store.schedules import ScheduleRows
from jarvis_agents.store.statistics import Statistics
from jarvis_agents.store.threads import ThreadStore
from jarvis_agents.store.users import Users
from jarvis_agents.threads import Earlier

agents = AgentRow.__table__
steps_table = StepRow.__table__
_NOW = bindparam("now", type_=DateTime(timezone=True))

# Guards test status (and attempt) with IS NOT DISTINCT FROM: for these NOT NULL
# columns the same test as `=`, but one no index can serve, so PostgreSQL's planner
# finds the row by its key even when its statistics are stale (store/postgres.py).
_GET = Prebuilt(select(*AGENT_READ).where(agents.c.id == bindparam("id")))
_GET_OF_USER = Prebuilt(
    select(*AGENT_READ).where(agents.c.id == bindparam("id"), agents.c.user_id == bindparam("user_id"))
)
_STEPS_AFTER = Prebuilt(
    select(*(steps_table.c[name] for name in STEP_COLUMNS))
    .where(steps_table.c.agent_id == bindparam("id"), steps_table.c.seq > bindparam("seq"))
    .order_by(steps_table.c.seq)
)
# A claim records the modes of at most this many models (more: the executor records
# an `auto` agent's mode itself, with a statement of its own).
CLAIM_MODES_MAX = 8


@cache
def _claim(models: int) -> Prebuilt:
    """The claim's compare-and-set, PENDING → RUNNING under the next attempt, with the
    row back; an `auto` agent of one of the `models` models given (`settled_model_i`,
    `settled_mode_i`) takes that mode in the same write."""
    settled = {"mode": case(
        *((and_(agents.c.mode == AgentMode.AUTO.value,
                agents.c.model == bindparam(f"settled_model_{i}")),
           bindparam(f"settled_mode_{i}", type_=agents.c.mode.type)) for i in range(models)),
        else_=agents.c.mode,
    )} if models else {}
    return Prebuilt(
        update(agents)
        .where(agents.c.id == bindparam("id"),
               agents.c.status.is_not_distinct_from(AgentStatus.PENDING.value))
        .values(status=AgentStatus.RUNNING.value, attempt=agents.c.attempt + 1,
                started_at=func.coalesce(agents.c.started_at, _NOW), heartbeat_at=_NOW,
                updated_at=_NOW, task_id=bindparam("task_id"), **settled)
        .returning(*AGENT_READ)
    )


class Repository(Recovery):
    """Agents and their steps over one SQLAlchemy engine; users, statistics, the webhook
    outbox, assistants, schedules and deletions beside them (`users`, `statistics`,
    `outbox`, `assistants`, `schedules`, `deletions`, …)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.connections = Connections(engine)
        self._one_statement = self.connections.one_statement
        self._read = self.connections.read
        self.users = Users(read=self._read, one_statement=self._one_statement)
        self.statistics = Statistics(read=self._read)
        self.outbox = OutboxStore(engine, self._one_statement)
        self.threads = ThreadStore(engine)
        self.assistants = AssistantRows(engine, self.connections)
        self.delegation = DelegationRows(engine, self.outbox, self._read, self._one_statement)
        self.schedules = ScheduleRows(engine, self.connections)
        self.deletions = DeletionRows(engine)

    # --- agents --------------------------------------------------------------------

    def create_agent(self, agent: Agent, *, max_active: int | None = None) -> tuple[Agent, bool]:
        """Insert a PENDING agent; returns (agent, created).

        With an idempotency key already used by this user, returns the earlier agent
        (created=False) when the request hash matches, or raises Conflict. Raises
        RateLimited when the user already has `max_active` agents PENDING or RUNNING.
        """
        try:
            earlier, limited = self._insert_agent(agent, max_active=max_active)
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
            return agent_from_row(earlier), False
        if limited and max_active is not None:
            raise too_many_active(max_active)
        return agent, True

    def _insert_agent(self, agent: Agent, *, max_active: int | None) -> tuple[Any, bool]:
        """Insert the agent unless the user has one with its idempotency key or has
        `max_active` agents active: (that earlier agent's row, whether the limit refused it)."""
        with self.engine.begin() as conn:
            earlier = self._by_idempotency_key(conn, agent)
            if earlier is not None:
                return earlier, False
            if max_active is not None and at_active_limit(conn, agent.user_id, max_active):
                return None, True
            conn.execute(insert(agents).values(**agent_values(agent)))
        return None, False

    def _by_idempotency_key(self, conn: Connection, agent: Agent) -> RowMapping | None:
        if agent.idempotency_key is None:
            return None
        return conn.execute(select(*AGENT_READ).where(
            agents.c.user_id == agent.user_id, agents.c.idempotency_key == agent.idempotency_key,
        )).mappings().first()

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None:
        if user_id is None:
            rows = self.connections.rows(_GET, {"id": agent_id})
        else:
            rows = self.connections.rows(_GET_OF_USER, {"id": agent_id, "user_id": user_id})
        return agent_from_row(rows[0]) if rows else None

    def get_many(self, agent_ids: Sequence[uuid.UUID]) -> list[Agent]:
        """These agents, in no particular order (one that does not exist is left out)."""
        return [agent_from_row(row) for row in self._read(
            select(*AGENT_READ).where(agents.c.id.in_(agent_ids)))] if agent_ids else []

    def list_agents(
        self,
        user_id: uuid.UUID,
        *,
        status: AgentStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        thread_id: uuid.UUID | None = None, caller_id: uuid.UUID | None = None,
        schedule_id: uuid.UUID | None = None,
    ) -> tuple[list[Agent], str | None]:
        """The user's agents, newest first, and the cursor of the next page (or None)."""
        query = select(*AGENT_READ).where(agents.c.user_id == user_id)
        for column, value in (("thread_id", thread_id), ("caller_id", caller_id),
                              ("schedule_id", schedule_id)):
            if value is not None:
                query = query.where(agents.c[column] == value)
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
        page = [agent_from_row(row) for row in rows[:limit]]
        more = len(rows) > limit
        return page, (encode_cursor(page[-1]) if more and page else None)

    def models_of(self, agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The model of each of these agents (those that exist)."""
        if not agent_ids:
            return {}
        rows = self._read(select(agents.c.id, agents.c.model).where(agents.c.id.in_(list(agent_ids))))
        return {row["id"]: row["model"] for row in rows}

    def waiting_since(self, cutoff: datetime, *, limit: int = 100) -> list[Agent]:
        """Agents WAITING since before `cutoff`: a WAITING agent's row changes last when it
        starts to wait (no heartbeat, no sweep touches it), so `updated_at` is that moment."""
        rows = self._read(
            select(*AGENT_READ)
            .where(agents.c.status == AgentStatus.WAITING.value, agents.c.updated_at < cutoff)
            .order_by(agents.c.updated_at).limit(limit)
        )
        return [agent_from_row(row) for row in rows]

    def agents_of_thread(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> list[Earlier]:
        return self.threads.agents_of_thread(user_id, thread_id)

    def insert_fork(self, agent: Agent, steps: Sequence[Step], *, max_active: int | None) -> None:
        self.threads.insert_fork(agent, steps, max_active=max_active)

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
        webhook delivery a change to a terminal status or to WAITING owes an agent with a
        webhook_url, with its body: the agent as it is after the change and its steps.
        """
        check_transition(expected, new)
        values = _transition_values(new, fields)
        try:
            return self._transition(agent_id, expected, values, attempt=attempt,
                                    heartbeat_before=heartbeat_before, steps=steps,
                                    owes=EVENTS.get(new))
        except IntegrityError:
            # Its rows' seq written by another run of the attempt: that run won (append_steps).
            if steps and attempt is not None and self._written_under(agent_id, steps[0].seq, attempt):
                return False
            raise

    def _transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, values: dict[str, Any], *,
        attempt: int | None, heartbeat_before: datetime | None, steps: Sequence[Step],
        owes: str | None,
    ) -> bool:
        """The compare-and-set of `transition`, the steps and the delivery owed."""
        condition = [agents.c.id == agent_id, agents.c.status == expected.value]
        if attempt is not None:
            condition.append(agents.c.attempt == attempt)
        if heartbeat_before is not None:
            condition.append(agents.c.heartbeat_at < heartbeat_before)
        statement = update(agents).where(*condition).values(**values)
        with (self.engine.begin() if steps or owes else self._one_statement()) as conn:
            won = conn.execute(statement).rowcount == 1
            if won and steps:
                conn.execute(insert(steps_table), step_values(agent_id, attempt or 0, steps))
            if won and owes:  # after the steps: the body counts them
                self.outbox.owe(conn, agent_id, owes, now=values["updated_at"])
        return won

    def resume(
        self, agent_id: uuid.UUID, *, user_id: uuid.UUID, attempt: int, max_active: int | None,
        **fields: Any,
    ) -> bool:
        """WAITING → PENDING under `attempt`; RateLimited past `max_active` (see
        store/active_limit.py)."""
        check_transition(AgentStatus.WAITING, AgentStatus.PENDING)
        return resume_waiting(self.engine, agent_id, user_id=user_id, attempt=attempt,
                              max_active=max_active,
                              values=_transition_values(AgentStatus.PENDING, fields))

    def claim(
        self, agent_id: uuid.UUID, *, task_id: str | None = None, now: datetime | None = None,
        modes: Mapping[str, AgentMode] | None = None,
    ) -> Agent | None:
        """PENDING → RUNNING under a new attempt; None when someone else got there first.

        `modes`: by model, the mode an `auto` agent of that model runs in, where the
        caller knows it already; such an agent takes it in the claim (what would
        otherwise be a write of its own, `set_mode`, per agent).
        `now` becomes its started_at (if first), heartbeat_at and updated_at. The
        commit does not wait for the WAL to reach the disk (BENCHMARKS.md says what that
        saves), which loses nothing: the WAL is written in order, so the attempt's first
        durable write makes the claim durable too; a crash before it leaves the agent
        PENDING, and the sweeper queues it again. Claimed again under the same attempt,
        its two runs are told apart by the steps' unique `seq`: the second to write one
        has lost (append_steps, transition; the runner keeps the runs apart).
        """
        known = list((modes or {}).items())[:CLAIM_MODES_MAX]
        params: dict[str, Any] = {"id": agent_id, "task_id": task_id, "now": now or utcnow()}
        for i, (model, mode) in enumerate(known):
            params[f"settled_model_{i}"], params[f"settled_mode_{i}"] = model, mode.value
        row = self.connections.one(_claim(len(known)), params, durable=False)
        return agent_from_row(row) if row else None

    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None:
        """Persist one iteration's steps in one transaction, or raise StaleAttempt.

        The guard is what refuses the write: it matches no row unless the agent is
        RUNNING under this attempt, and it holds the row lock until commit.
        `step_count` is the agent's count with these steps, which the guard, an
        UPDATE, stores (PostgreSQL's only locks the row: see store/postgres.py).
        A first step whose `seq` this attempt has written already refuses it too:
        another run of the attempt wrote it first (a claim a crash took back: `claim`).
        """
        try:
            owned = self._append_steps(agent_id, attempt, steps, step_count=step_count)
        except IntegrityError as exc:
            if not (steps and self._written_under(agent_id, steps[0].seq, attempt)):
                raise  # a bad row, or an earlier attempt's seq: a bug, not a race
            raise StaleAttempt(f"agent {agent_id}: step {steps[0].seq} was written by another "
                               f"run of attempt {attempt}") from exc
        if not owned:
            raise StaleAttempt(f"agent {agent_id} is no longer RUNNING under attempt {attempt}")

    def _written_under(self, agent_id: uuid.UUID, seq: int, attempt: int) -> bool:
        """Whether the agent's step `seq` is stored, written under `attempt`."""
        with self.engine.connect() as conn:
            written = conn.execute(select(steps_table.c.attempt).where(
                steps_table.c.agent_id == agent_id, steps_table.c.seq == seq)).scalar()
        return written == attempt

    def _append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> bool:
        now = utcnow()
        with self.engine.begin() as conn:
            owned = conn.execute(
                update(agents)
                .where(*running_under(agent_id, attempt))
                .values(step_count=step_count, heartbeat_at=now, updated_at=now)
            ).rowcount == 1
            if owned:
                conn.execute(insert(steps_table), step_values(agent_id, attempt, steps))
        return owned

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]:
        return [step_from_row(row) for row in self.connections.rows(
            _STEPS_AFTER, {"id": agent_id, "seq": seq})]

    def agent_with_steps(self, agent_id: uuid.UUID, *, after: int = 0,
                         user_id: uuid.UUID | None = None) -> tuple[Agent | None, list[Step]]:
        return agent_with_steps(self.connections, agent_id, after=after, user_id=user_id)

    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None:
        """Record the mode an agent `auto` runs in, once its attempt has chosen it."""
        with self._one_statement() as conn:
            conn.execute(
                update(agents)
                .where(*running_under(agent_id, attempt), agents.c.mode != mode.value)
                .values(mode=mode.value)
            )


def _transition_values(new: AgentStatus, fields: dict[str, Any]) -> dict[str, Any]:
    """The columns a change to `new` sets: `fields`, the status, and when (`now`)."""
    now = fields.pop("now", None) or utcnow()
    values: dict[str, Any] = {"status": new.value, "updated_at": now, **fields}
    if new.is_terminal:
        values.setdefault("completed_at", now)
    if isinstance(values.get("stop_reason"), StopReason):
        values["stop_reason"] = values["stop_reason"].value
    return values
