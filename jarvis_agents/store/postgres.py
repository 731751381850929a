"""The store on PostgreSQL: the Repository, with the statements a measured gain needs
written for PostgreSQL alone.

Only these: an iteration's steps written under their guard in one statement,
the steps of a worker's agents that arrive while another write is out in one
statement and commit (store/group_commit.py), a status change with its steps in one
statement (and, for an agent with a webhook_url, the delivery it owes in the same
transaction, on the same cursor), and a create in one round trip. Everything else is
the Repository's, on PostgreSQL as on SQLite (store/repository.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Engine, bindparam, select
from sqlalchemy.exc import DBAPIError

from jarvis_agents.lifecycle import Agent, AgentStatus, Step
from jarvis_agents.store.a2a_push import CONFIGS_OF, NO_CONFIGS_SQL
from jarvis_agents.store.compiled import Prebuilt
from jarvis_agents.store.connections import Cursor, HeldConnection
from jarvis_agents.store.group_commit import GroupCommit
from jarvis_agents.store.models import AgentRow
from jarvis_agents.store.outbox import AGENT_AS_READ, OWE, owed_all
from jarvis_agents.store.repository import Repository
from jarvis_agents.store.rows import AGENT_READ, agent_from_row, agent_values

agents = AgentRow.__table__
# Columns whose values go to psycopg2 as JSON text (it cannot adapt a dict).
_JSON_COLUMNS = frozenset(c.name for c in agents.c if isinstance(c.type, JSON))

# The guard and the step rows in one statement: the guard takes the agent's row lock
# (waiting behind a cancel, then re-checking its WHERE) and the INSERT writes only
# what the guard returned, so a refused write inserts nothing. The rows come as one
# array per column, so the text is the same for any number of steps.
_GUARDED_STEPS = """
WITH owned AS ({guard}),
written AS (
    INSERT INTO agent_steps
        (agent_id, seq, step, type, tool, content, created_at, duration_ms, attempt,
         call_id, input_tokens, output_tokens)
    SELECT owned.id, s.seq, s.step, s.type, s.tool, s.content, s.created_at,
           s.duration_ms, %(attempt)s::int, s.call_id, s.input_tokens, s.output_tokens
    FROM owned, unnest(%(seq)s::int[], %(step)s::int[], %(type)s::text[], %(tool)s::text[],
                       %(content)s::text[], %(created_at)s::timestamptz[],
                       %(duration_ms)s::int[], %(call_id)s::text[],
                       %(input_tokens)s::int[], %(output_tokens)s::int[])
        AS s(seq, step, type, tool, content, created_at, duration_ms, call_id,
             input_tokens, output_tokens)
)
SELECT count(*) FROM owned
"""

# Every guard finds its row by the primary key and tests status and attempt with
# IS NOT DISTINCT FROM: for these NOT NULL columns the same test as `=`, but one no
# index can serve. With `status = 'RUNNING'` the planner, whenever its statistics were
# stale or missing (a young table, a burst of agents since the last ANALYZE), priced
# ix_agents_status_heartbeat the same as the key and picked it: each step write then
# walked every RUNNING entry of that index, the dead ones of every earlier write
# included: a cost that grows with the agents running.
#
# An iteration's steps only lock the agent's row (FOR SHARE: a cancel, a claim or a
# heartbeat waits for the commit; the steps' foreign key checks share it). Updating
# the row as well — step_count, heartbeat_at — cost a new version of it and an entry
# in each of its five indexes per step, a large part of the write (BENCHMARKS.md,
# notes). step_count is
# read from the steps instead (models.STEP_COUNT_AS_READ), and the heartbeat thread
# keeps heartbeat_at.
_APPEND_STEPS = _GUARDED_STEPS.format(guard=(
    "SELECT id FROM agents"
    " WHERE id = %(id)s AND (status, attempt) IS NOT DISTINCT FROM ('RUNNING', %(attempt)s)"
    " FOR SHARE"
))

# Several agents' steps in one statement (store/group_commit.py): the same guard for
# each (agent, attempt), run for each as a lookup by its key, then the rows of those
# that passed, and which passed. The guards lock their rows in the order the agents
# come, which the caller makes the order of their ids, as the heartbeat's: two
# statements that each lock several agents can then never wait for each other. (A
# join instead of the lookups locks in no set order, and the planner scans the whole
# table for it until the table holds tens of thousands of agents.)
_APPEND_STEPS_OF_MANY = """
WITH owned AS (
    SELECT guard.id, w.attempt
    FROM unnest(%(id)s::uuid[], %(attempt)s::int[]) AS w(id, attempt),
    LATERAL (
        SELECT id FROM agents
        WHERE id = w.id AND (status, attempt) IS NOT DISTINCT FROM ('RUNNING', w.attempt)
        FOR SHARE
    ) AS guard
),
written AS (
    INSERT INTO agent_steps
        (agent_id, seq, step, type, tool, content, created_at, duration_ms, attempt,
         call_id, input_tokens, output_tokens)
    SELECT s.agent_id, s.seq, s.step, s.type, s.tool, s.content, s.created_at,
           s.duration_ms, s.attempt, s.call_id, s.input_tokens, s.output_tokens
    FROM unnest(%(agent_id)s::uuid[], %(step_attempt)s::int[], %(seq)s::int[],
                %(step)s::int[], %(type)s::text[], %(tool)s::text[], %(content)s::text[],
                %(created_at)s::timestamptz[], %(duration_ms)s::int[], %(call_id)s::text[],
                %(input_tokens)s::int[], %(output_tokens)s::int[])
        AS s(agent_id, attempt, seq, step, type, tool, content, created_at, duration_ms,
             call_id, input_tokens, output_tokens)
    JOIN owned ON owned.id = s.agent_id AND owned.attempt = s.attempt
)
SELECT id, attempt FROM owned
"""

# create_agent in one round trip: the function of migration 0002 locks the user's row,
# then checks the idempotency key and the active limit and inserts, each step a
# statement of its own that sees every create committed while it waited for the lock.
# The row goes in as JSON, matched to the columns by name.
_CREATE_AGENT = (
    "SELECT jarvis_create_agent(json_populate_record(NULL::agents, %(agent)s), %(max_active)s)"
)
_BY_IDEMPOTENCY_KEY = Prebuilt(select(*AGENT_READ).where(
    agents.c.user_id == bindparam("user_id"), agents.c.idempotency_key == bindparam("key")))

# One agent's iteration to write: (agent id, its attempt, the steps).
StepWrite = tuple[uuid.UUID, int, Sequence[Step]]


class PostgresRepository(Repository):
    """The Repository on a psycopg2 engine, with the step writes, a transition with steps
    and the create each in one statement."""

    def __init__(self, engine: Engine) -> None:
        if engine.dialect.driver != "psycopg2":
            raise ValueError(f"PostgreSQL needs the psycopg2 driver, not {engine.dialect.driver}")
        super().__init__(engine)
        self._writer = HeldConnection(engine)
        # Step writes made while another is out share the next statement and commit.
        self._step_writes: GroupCommit[StepWrite, bool] = GroupCommit(
            lambda write: self.append_steps_of_one(*write), self.append_steps_of_many
        )

    def _insert_agent(self, agent: Agent, *, max_active: int | None) -> tuple[Any, bool]:
        values = agent_values(agent)
        row = json.dumps(values, default=str)  # UUIDs and timestamps as PostgreSQL reads them
        with self.connections.cursor() as cursor:
            cursor.execute(_CREATE_AGENT, {"agent": row, "max_active": max_active})
            (outcome,) = cursor.fetchone()
        if outcome == "repeat":  # committed: it stays there to be read
            rows = self.connections.rows(
                _BY_IDEMPOTENCY_KEY, {"user_id": agent.user_id, "key": agent.idempotency_key})
            return (rows[0] if rows else None), False
        return None, outcome == "limited"

    def _transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, values: dict[str, Any], *,
        attempt: int | None, heartbeat_before: datetime | None, steps: Sequence[Step],
        owes: str | None,
    ) -> bool:
        """One statement, one round trip, when there are steps to write with the change:
        the guard, then the steps if it won. A change that owes a webhook is made so
        only for an agent without a webhook_url (the guard says so); for one with a url
        (or when the guard lost), on the same cursor, in `_owing`'s transaction."""
        if not (steps or owes):
            return super()._transition(agent_id, expected, values, attempt=attempt,
                                       heartbeat_before=heartbeat_before, steps=steps, owes=owes)
        guard = {"attempt": attempt, "heartbeat_before": heartbeat_before, "steps": steps}
        with self.connections.cursor() as cursor:
            sql, params = _guarded(agent_id, expected, values, **guard,
                                   without_webhook=owes is not None)
            cursor.execute(sql, params)
            (owned,) = cursor.fetchone()
            if owned == 1 or owes is None:
                return bool(owned == 1)
            return self._owing(cursor, _guarded(agent_id, expected, values, **guard),
                               agent_id=agent_id, event=owes, now=values["updated_at"])

    def _owing(
        self, cursor: Cursor, guarded: tuple[str, dict[str, Any]], *, agent_id: uuid.UUID,
        event: str, now: datetime,
    ) -> bool:
        """The guard and the steps, then the agent read back and the delivery it owes
        with its body (store/outbox.py), in one transaction. Its statements run as plain
        text, not prepared: a prepared statement that fails inside a transaction
        (store/prepared.py) leaves nothing to fall back on."""
        read, owe = AGENT_AS_READ.on(self.engine.dialect), OWE.on(self.engine.dialect)
        sql, params = guarded
        cursor.raw.execute("BEGIN; " + sql, params)  # one round trip
        (owned,) = cursor.fetchone()
        if owned != 1:
            cursor.raw.execute("ROLLBACK")
            return False
        cursor.raw.execute(read.sql, read.parameters({"agent_id": agent_id}))
        agent = agent_from_row(read.row(cursor.fetchone()))
        pushes = CONFIGS_OF.on(self.engine.dialect)
        cursor.raw.execute(pushes.sql, pushes.parameters({"agent_id": agent_id}))
        rows = [pushes.row(raw) for raw in cursor.fetchall()]
        deliveries = owed_all(agent, event, rows, now=now)
        for delivery in deliveries[:-1]:
            cursor.raw.execute(owe.sql, owe.parameters(delivery))
        if deliveries:
            cursor.raw.execute(owe.sql + "; COMMIT", owe.parameters(deliveries[-1]))  # one round trip
        else:
            cursor.raw.execute("COMMIT")
        return True

    def _append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> bool:
        """The guard only locks the row here (see _APPEND_STEPS); the count is read from
        the steps (models.STEP_COUNT_AS_READ)."""
        return self._step_writes.write((agent_id, attempt, steps))

    def append_steps_of_one(self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step]) -> bool:
        """Write the steps if the agent is RUNNING under `attempt`; False when refused."""
        with self._writer_cursor() as cursor:
            cursor.execute(_APPEND_STEPS, _step_params({"id": agent_id, "attempt": attempt}, steps))
            (owned,) = cursor.fetchone()
        return bool(owned == 1)

    def append_steps_of_many(self, writes: Sequence[StepWrite]) -> list[bool | Exception]:
        """Each (agent, attempt, steps) written if the agent is RUNNING under that attempt,
        in one statement; per write, whether it was, or the error it alone raised.

        A statement refused, by the server or by psycopg2 before sending it, wrote
        nothing (autocommit), so its writes are then made one by one: one agent's bad
        rows (a unique violation) or its wait for a lock fail only its own write. A
        connection that broke raises for all: whether they were written is unknown, as
        for a write alone.
        """
        ordered = sorted(writes, key=lambda write: (write[0], write[1]))  # the lock order
        params: dict[str, Any] = {"id": [w[0] for w in ordered], "attempt": [w[1] for w in ordered]}
        _step_params(params, [step for _, _, steps in ordered for step in steps])
        params["agent_id"] = [agent_id for agent_id, _, steps in ordered for _ in steps]
        params["step_attempt"] = [attempt for _, attempt, steps in ordered for _ in steps]
        try:
            with self._writer_cursor() as cursor:
                cursor.execute(_APPEND_STEPS_OF_MANY, params)
                owned = set(cursor.fetchall())
        except (DBAPIError, ValueError, UnicodeError) as exc:  # the last two: text
            # psycopg2 would not send. Nothing was written, unless the connection broke.
            if isinstance(exc, DBAPIError) and exc.connection_invalidated:
                raise
            return [self._append_steps_or_error(*write) for write in writes]
        return [(agent_id, attempt) in owned for agent_id, attempt, _ in writes]

    def _append_steps_or_error(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step]
    ) -> bool | Exception:
        try:
            return self.append_steps_of_one(agent_id, attempt, steps)
        except Exception as exc:  # noqa: BLE001 - raised on the thread whose write it is
            return exc

    @contextmanager
    def _writer_cursor(self) -> Iterator[Cursor]:
        """A cursor in autocommit on the step writer's own connection (HeldConnection)."""
        with self._writer.borrow() as pooled, self.connections.cursor_on(pooled) as cursor:
            yield cursor


def _guarded(
    agent_id: uuid.UUID, expected: AgentStatus, values: dict[str, Any], *,
    attempt: int | None, heartbeat_before: datetime | None, steps: Sequence[Step],
    without_webhook: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The guard and the steps in one statement (_GUARDED_STEPS), and its parameters;
    `without_webhook`: the guard holds only for an agent that has no webhook_url."""
    # Column names come from the table (an unknown one is a KeyError), values are bound.
    sets = ", ".join(f"{agents.c[name].name} = %(set_{name})s" for name in values)
    guard = f"UPDATE agents SET {sets} WHERE id = %(id)s AND status IS NOT DISTINCT FROM %(expected)s"
    if attempt is not None:
        guard += " AND attempt IS NOT DISTINCT FROM %(attempt)s"
    if heartbeat_before is not None:
        guard += " AND heartbeat_at < %(heartbeat_before)s"
    if without_webhook:  # and no A2A push config (store/a2a_push.py)
        guard += f" AND webhook_url IS NULL AND {NO_CONFIGS_SQL}"
    guard += " RETURNING id"
    params = {f"set_{name}": json.dumps(value) if name in _JSON_COLUMNS else value
              for name, value in values.items()}
    params.update(id=agent_id, expected=expected.value, attempt=attempt or 0,
                  heartbeat_before=heartbeat_before)
    return _GUARDED_STEPS.format(guard=guard), _step_params(params, steps)


def _step_params(params: dict[str, Any], steps: Sequence[Step]) -> dict[str, Any]:
    """`params` and the steps' columns, one array each (see _GUARDED_STEPS)."""
    params.update(
        seq=[s.seq for s in steps], step=[s.step for s in steps],
        type=[s.type.value for s in steps], tool=[s.tool for s in steps],
        content=[s.content for s in steps], created_at=[s.created_at for s in steps],
        duration_ms=[s.duration_ms for s in steps], call_id=[s.call_id for s in steps],
        input_tokens=[s.usage.input_tokens if s.usage else None for s in steps],
        output_tokens=[s.usage.output_tokens if s.usage else None for s in steps],
    )
    return params
