"""The repository's PostgreSQL side: autocommit, and its busiest statements as prebuilt SQL.

A statement that stands alone runs in autocommit: one round trip, with no BEGIN and
COMMIT (or ROLLBACK after a read) around it. The statements the worker runs on every
step and the API on every request — read an agent, write steps under their guard,
heartbeat, create an agent — run as prebuilt SQL on a psycopg2 cursor: SQLAlchemy's
work per statement (cache lookup, execution context, result processing) costs about
0.3 ms of CPU on our hardware, the cursor about 0.1 ms. Errors still come out as
SQLAlchemy's (IntegrityError, OperationalError, …), like everywhere else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import JSON, Engine, Executable, event
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.pool import PoolProxiedConnection

from jarvis_agents.errors import first_line
from jarvis_agents.lifecycle import AgentStatus, Step, utcnow
from jarvis_agents.store.database import check_idle, make_engine
from jarvis_agents.store.models import AS_READ, AgentRow
from jarvis_agents.store.outbox import OWED_CTE

T = TypeVar("T")
log = logging.getLogger(__name__)

agents = AgentRow.__table__
AGENT_COLUMNS = tuple(column.name for column in agents.c)
_AGENT_LIST = ", ".join(
    f"{AS_READ[name]} AS {name}" if name in AS_READ else name for name in AGENT_COLUMNS
)
# Columns whose values go to psycopg2 as JSON text (it cannot adapt a dict).
_JSON_COLUMNS = frozenset(c.name for c in agents.c if isinstance(c.type, JSON))

_SELECT_AGENT = f"SELECT {_AGENT_LIST} FROM agents WHERE id = %(id)s"

# The guard and the step rows in one statement: the guard takes the agent's row lock
# (waiting behind a cancel, then re-checking its WHERE) and the INSERT writes only
# what the guard returned, so a refused write inserts nothing. The rows come as one
# array per column, so the text is the same for any number of steps.
_GUARDED_STEPS = """
WITH owned AS ({guard}),{owed}
written AS (
    INSERT INTO agent_steps
        (agent_id, seq, step, type, tool, content, created_at, duration_ms, attempt,
         call_id, input_tokens, output_tokens)
    SELECT owned.id, s.seq, s.step, s.type, s.tool, s.content, s.created_at,
           s.duration_ms, %(attempt)s, s.call_id, s.input_tokens, s.output_tokens
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
# included (0.4 ms of a 0.8 ms write with 1,200 agents running).
#
# An iteration's steps only lock the agent's row (FOR SHARE: a cancel, a claim or a
# heartbeat waits for the commit; the steps' foreign key checks share it). Updating
# the row as well — step_count, heartbeat_at — cost a new version of it and an entry
# in each of its five indexes per step: a quarter to a third of the write (1.3–1.5 ms
# against 1.0–1.1 with the lock alone, measured in turn on one machine). step_count is
# read from the steps instead (models.STEP_COUNT_AS_READ), and the heartbeat thread
# keeps heartbeat_at.
_APPEND_STEPS = _GUARDED_STEPS.format(owed="", guard=(
    "SELECT id FROM agents"
    " WHERE id = %(id)s AND (status, attempt) IS NOT DISTINCT FROM ('RUNNING', %(attempt)s)"
    " FOR SHARE"
))

# The step write is what every iteration runs, so each connection prepares it once:
# PostgreSQL then skips parsing, rewriting and planning it on every call (0.08-0.16
# ms of a 0.45-0.6 ms write, measured in turn on one machine). The arguments carry
# their casts: psycopg2 sends a list of only None as an untyped '{NULL}'. The name
# carries a hash of the text, so that a backend still holding another version's
# statement (a pooler's, kept across clients) is never asked to run it. A server that
# answers that it has no such statement (a pooler in transaction mode hands each
# statement to any of its backends) gets the plain text from then on; see
# `_executed_prepared`.
_APPEND_PARAMS = {
    "id": "uuid", "attempt": "int", "seq": "int[]", "step": "int[]", "type": "text[]",
    "tool": "text[]", "content": "text[]", "created_at": "timestamptz[]", "duration_ms": "int[]",
    "call_id": "text[]", "input_tokens": "int[]", "output_tokens": "int[]",
}


def _positional(sql: str) -> str:
    for number, name in enumerate(_APPEND_PARAMS, 1):
        sql = sql.replace(f"%({name})s", f"${number}")
    return sql


_APPEND_BODY = f"({', '.join(_APPEND_PARAMS.values())}) AS {_positional(_APPEND_STEPS)}"
_APPEND_NAME = "jarvis_append_steps_" + hashlib.sha256(_APPEND_BODY.encode()).hexdigest()[:12]
_PREPARE = {_APPEND_NAME: f"PREPARE {_APPEND_NAME} {_APPEND_BODY}"}
_EXECUTE_APPEND = f"EXECUTE {_APPEND_NAME} (" + ", ".join(
    f"%({name})s::{kind}" for name, kind in _APPEND_PARAMS.items()
) + ")"
_NO_SUCH_STATEMENT = "26000"  # invalid_sql_statement_name

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
_DUPLICATE_STATEMENT = "42P05"  # duplicate_prepared_statement

# The claim's compare-and-set, PENDING → RUNNING under the next attempt, with the row back.
_CLAIM = (
    "UPDATE agents SET status = 'RUNNING', attempt = attempt + 1,"
    " started_at = coalesce(started_at, %(now)s), heartbeat_at = %(now)s,"
    " updated_at = %(now)s, task_id = %(task_id)s"
    f" WHERE id = %(id)s AND status IS NOT DISTINCT FROM 'PENDING' RETURNING {_AGENT_LIST}"
)

STEP_COLUMNS = ("seq", "step", "type", "tool", "content", "created_at", "duration_ms",
                "call_id", "input_tokens", "output_tokens")
_STEPS_AFTER = (
    f"SELECT {', '.join(STEP_COLUMNS)} FROM agent_steps"
    " WHERE agent_id = %(id)s AND seq > %(seq)s ORDER BY seq"
)

# Row locks taken in id order, as the batched step write takes them (see above).
_HEARTBEAT = (
    "WITH alive AS (SELECT id FROM agents WHERE status IS NOT DISTINCT FROM 'RUNNING'"
    " AND (id, attempt) IN (SELECT * FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]))"
    " ORDER BY id FOR NO KEY UPDATE)"
    " UPDATE agents SET heartbeat_at = %(now)s FROM alive WHERE agents.id = alive.id"
)

# create_agent in one round trip: the function of migration 0002 locks the user's row,
# then checks the idempotency key and the active limit and inserts, each step a
# statement of its own that sees every create committed while it waited for the lock.
# The row goes in as JSON, matched to the columns by name.
_CREATE_AGENT = (
    "SELECT jarvis_create_agent(json_populate_record(NULL::agents, %(agent)s), %(max_active)s)"
)
_BY_IDEMPOTENCY_KEY = (
    f"SELECT {_AGENT_LIST} FROM agents"
    " WHERE user_id = %(user_id)s AND idempotency_key = %(idempotency_key)s"
)



# One agent's iteration to write: (agent id, its attempt, the steps).
StepWrite = tuple[uuid.UUID, int, Sequence[Step]]


def _agent_row(row: Sequence[Any] | None) -> dict[str, Any] | None:
    return dict(zip(AGENT_COLUMNS, row, strict=True)) if row else None


def _raw_connection(engine: Engine) -> PoolProxiedConnection:
    """`engine.raw_connection()`, with a failure to connect raised as SQLAlchemy's error
    (OperationalError, …), as `engine.connect()` raises it, not psycopg2's: callers
    (the API's 503, the worker's retries) know only SQLAlchemy's."""
    error = engine.dialect.loaded_dbapi.Error
    try:
        return engine.raw_connection()
    except error as exc:
        raise DBAPIError.instance(None, None, exc, error, dialect=engine.dialect) from exc


class _HeldConnection:
    """A connection of its own for one user at a time, kept between uses.

    The step writes of a worker process go out one statement at a time (group commit,
    store/group_commit.py), so one connection serves them all. Kept open between
    writes, it saves what a pooled connection costs per write: the checkout and the
    check-in, with autocommit switched on and off around them, ~0.25 ms of a ~1.5 ms
    write one agent at a time (the statement itself ~1.25 ms), measured in turn on one
    machine. It comes from a pool of one beside the caller's (opened at the first
    use), so it never takes a connection the caller's pool counts on. A connection
    found dead (`check_idle`, as at any checkout) or broken in use is replaced; once a
    minute it goes back to its pool, whose recycling then applies. Disposing of the
    caller's engine closes it; a forked child leaves the parent's alone and opens its own.
    """

    HOLD_S = 60.0

    def __init__(self, engine: Engine) -> None:
        self._url = engine.url.render_as_string(hide_password=False)
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._pooled: PoolProxiedConnection | None = None
        self._taken_at = self._idle_since = 0.0
        self._pid = os.getpid()
        event.listen(engine, "engine_disposed", self._close)

    @contextmanager
    def borrow(self) -> Iterator[PoolProxiedConnection]:
        with self._lock:
            pooled = self._take()
            try:
                yield pooled
            finally:
                if pooled.dbapi_connection is None:  # broken, and invalidated
                    self._pooled = None
                else:
                    self._idle_since = time.monotonic()

    def _forked(self) -> bool:
        """In a forked child, forget the parent's connection and engine (never close
        them: that would end the parent's session); whether this is such a child."""
        if self._pid == os.getpid():
            return False
        self._pid, self._pooled, self._engine = os.getpid(), None, None
        return True

    def _take(self) -> PoolProxiedConnection:
        self._forked()
        if self._engine is None:
            self._engine = make_engine(self._url, pool_size=1, overflow=False)
        if (pooled := self._pooled) is not None:
            if time.monotonic() - self._taken_at > self.HOLD_S:
                self._pooled = None
                pooled.close()
            else:
                try:
                    check_idle(self._engine.dialect, pooled.dbapi_connection, self._idle_since)
                except DisconnectionError:
                    self._pooled = None
                    pooled.invalidate()
        if self._pooled is None:
            # If this raises (the server is still down), the next write tries again.
            self._pooled = _raw_connection(self._engine)
            self._taken_at = time.monotonic()
        return self._pooled

    def _close(self, _engine: Engine) -> None:
        with self._lock:
            if self._forked():  # dispose(close=False) in a child: nothing here is its own
                return
            if self._pooled is not None:
                self._pooled.close()
                self._pooled = None
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


class PostgresStatements:
    """Autocommit connections and the prebuilt statements, over one psycopg2 engine."""

    def __init__(self, engine: Engine) -> None:
        if engine.dialect.driver != "psycopg2":
            raise ValueError(f"PostgreSQL needs the psycopg2 driver, not {engine.dialect.driver}")
        self.engine = engine
        self.dialect = engine.dialect
        self.error = engine.dialect.loaded_dbapi.Error
        self.prepared_statements = True  # until the server shows it cannot keep them
        self._writer = _HeldConnection(engine)

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A SQLAlchemy connection in autocommit: each statement is one round trip.

        Not `execution_options(isolation_level="AUTOCOMMIT")`: its reset on return
        makes psycopg2 send `SET default_transaction_isolation` every time.
        """
        with self.engine.connect() as conn:
            dbapi_connection = conn.connection.dbapi_connection
            dbapi_connection.autocommit = True
            try:
                yield conn
            finally:
                if not conn.invalidated and not dbapi_connection.closed:
                    try:
                        dbapi_connection.autocommit = False
                    except self.error:  # a statement cut short (a timeout) left it busy
                        conn.invalidate()

    @contextmanager
    def cursor(self, *, prepare: str | None = None) -> Iterator[Any]:
        """A psycopg2 cursor in autocommit on a pooled connection.

        With `prepare`, the statement of that name (see _PREPARE) is prepared on the
        connection unless it already was. A transaction the caller opened with BEGIN
        and left open (an exception, an early return) is rolled back here; a
        connection that broke is not pooled again.
        """
        pooled = _raw_connection(self.engine)
        try:
            with self._cursor_on(pooled, prepare) as cursor:
                yield cursor
        finally:
            if pooled.dbapi_connection is not None:  # None: broken, and invalidated
                pooled.dbapi_connection.autocommit = False
                pooled.close()

    @contextmanager
    def _writer_cursor(self, *, prepare: str | None = None) -> Iterator[Any]:
        """As `cursor`, on the step writer's own connection (see _HeldConnection)."""
        with self._writer.borrow() as pooled, self._cursor_on(pooled, prepare) as cursor:
            yield cursor

    @contextmanager
    def _cursor_on(self, pooled: PoolProxiedConnection, prepare: str | None) -> Iterator[Any]:
        """A cursor in autocommit on `pooled`, which is invalidated if it broke."""
        from psycopg2.extensions import TRANSACTION_STATUS_IDLE

        connection = pooled.dbapi_connection
        broken = False
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                if prepare is not None:
                    self._prepare(cursor, pooled.info, prepare)
                yield cursor
        except self.error as exc:
            broken = self.dialect.is_disconnect(exc, connection, None)
            raise DBAPIError.instance(
                None, None, exc, self.error, connection_invalidated=broken, dialect=self.dialect
            ) from exc
        finally:
            if not broken:
                broken = bool(connection.closed) or (
                    connection.get_transaction_status() != TRANSACTION_STATUS_IDLE
                    and not self._roll_back(connection)
                )
            if broken:
                pooled.invalidate()  # closes it, and returns its place to the pool

    def _prepare(self, cursor: Any, info: dict[str, Any], name: str) -> None:
        """Prepare statement `name` on this connection once (`info` lives as long as it)."""
        prepared = info.setdefault("jarvis_prepared", set())
        if name in prepared:
            return
        try:
            cursor.execute(_PREPARE[name])
        except self.error as exc:  # a pooler's backend where another connection did it
            if getattr(exc, "pgcode", None) != _DUPLICATE_STATEMENT:
                raise
        prepared.add(name)

    def _roll_back(self, connection: Any) -> bool:
        try:
            with connection.cursor() as cursor:
                cursor.execute("ROLLBACK")
        except self.error:
            return False
        return True

    def read(self, statement: Executable) -> list[RowMapping]:
        def run() -> list[RowMapping]:
            with self.connection() as conn:
                return list(conn.execute(statement).mappings().all())

        return _once_more_if_dropped(run)

    def agent(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None) -> dict[str, Any] | None:
        sql, params = _SELECT_AGENT, {"id": agent_id, "user_id": user_id}
        if user_id is not None:
            sql += " AND user_id = %(user_id)s"

        def run() -> Any:
            with self.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()

        row = _once_more_if_dropped(run)
        return _agent_row(row)

    def claim(
        self, agent_id: uuid.UUID, *, task_id: str | None, now: datetime
    ) -> dict[str, Any] | None:
        """The claim's compare-and-set; the agent's row when it won, None otherwise.

        Its commit does not wait for the WAL to reach the disk (0.7 ms of the claim's
        1.4, and a third of its server CPU, on our hardware). That loses nothing: the
        WAL is written in order, so the attempt's first durable write (its first
        steps) makes the claim durable too; and if the server crashes before that,
        the agent is PENDING again with nothing of the attempt kept, its later writes
        are refused by their guard, and the sweeper queues it again.
        """
        params = {"id": agent_id, "task_id": task_id, "now": now}
        with self.cursor() as cursor:
            # Two statements in one simple query: one implicit transaction, one round trip.
            cursor.execute("SET LOCAL synchronous_commit = off; " + _CLAIM, params)
            row = cursor.fetchone()
        return _agent_row(row)

    def steps_after(self, agent_id: uuid.UUID, seq: int) -> list[dict[str, Any]]:
        """The agent's step rows after `seq`, in order (a read: retried on a dropped connection)."""
        params = {"id": agent_id, "seq": seq}

        def run() -> list[Any]:
            with self.cursor() as cursor:
                cursor.execute(_STEPS_AFTER, params)
                return cursor.fetchall()

        return [dict(zip(STEP_COLUMNS, row, strict=True)) for row in _once_more_if_dropped(run)]

    def append_steps(self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step]) -> bool:
        """Write the steps if the agent is RUNNING under `attempt`; False when refused."""
        params = _step_params({"id": agent_id, "attempt": attempt}, steps)
        prepared = self.prepared_statements
        with self._writer_cursor(prepare=_APPEND_NAME if prepared else None) as cursor:
            if not (prepared and self._executed_prepared(cursor, params)):
                cursor.execute(_APPEND_STEPS, params)
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
            return self.append_steps(agent_id, attempt, steps)
        except Exception as exc:  # noqa: BLE001 - raised on the thread whose write it is
            return exc

    def _executed_prepared(self, cursor: Any, params: dict[str, Any]) -> bool:
        """Run the prepared step write; False if the server has no such statement."""
        try:
            cursor.execute(_EXECUTE_APPEND, params)
        except self.error as exc:
            if getattr(exc, "pgcode", None) != _NO_SUCH_STATEMENT:
                raise
            # Nothing ran (autocommit): the statement went to a backend that never
            # prepared it. Prepared statements cannot work here; stop using them.
            log.warning("the database lost a prepared statement (%s); a connection "
                        "pooler in transaction mode? Sending plain SQL from now on", first_line(exc))
            self.prepared_statements = False
            return False
        return True

    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, values: dict[str, Any], *,
        attempt: int | None, heartbeat_before: datetime | None, steps: Sequence[Step],
        owes: str | None = None,
    ) -> bool:
        """Compare-and-set the agent's row to `values` and write `steps` if it won
        (`attempt` and `heartbeat_before` as in Repository.transition), and the webhook
        delivery of event `owes` if the agent has a webhook_url (store/outbox.py)."""
        # Column names come from the table (an unknown one is a KeyError), values are bound.
        sets = ", ".join(f"{agents.c[name].name} = %(set_{name})s" for name in values)
        guard = f"UPDATE agents SET {sets} WHERE id = %(id)s AND status IS NOT DISTINCT FROM %(expected)s"
        if attempt is not None:
            guard += " AND attempt IS NOT DISTINCT FROM %(attempt)s"
        if heartbeat_before is not None:
            guard += " AND heartbeat_at < %(heartbeat_before)s"
        guard += " RETURNING id, webhook_url" if owes else " RETURNING id"
        params = {f"set_{name}": json.dumps(value) if name in _JSON_COLUMNS else value
                  for name, value in values.items()}
        params.update(id=agent_id, expected=expected.value, attempt=attempt or 0,
                      heartbeat_before=heartbeat_before, delivery_id=uuid.uuid4(), event=owes)
        sql = _GUARDED_STEPS.format(guard=guard, owed=OWED_CTE if owes else "")
        return self._guarded_steps(sql, params, steps)

    def _guarded_steps(self, sql: str, params: dict[str, Any], steps: Sequence[Step]) -> bool:
        with self.cursor() as cursor:
            cursor.execute(sql, _step_params(params, steps))
            (owned,) = cursor.fetchone()
        return bool(owned == 1)

    def heartbeat(self, pairs: list[tuple[uuid.UUID, int]]) -> int:
        params = {"now": utcnow(), "ids": [i for i, _ in pairs], "attempts": [a for _, a in pairs]}
        with self.cursor() as cursor:
            cursor.execute(_HEARTBEAT, params)
            return int(cursor.rowcount)

    def create_agent(
        self, values: dict[str, Any], *, max_active: int | None
    ) -> tuple[dict[str, Any] | None, bool]:
        """Insert the agent row `values` unless the user has one with its idempotency key
        or has `max_active` agents active; returns (that earlier row, whether the limit
        refused it)."""
        agent = json.dumps(values, default=str)  # UUIDs and timestamps as PostgreSQL reads them
        with self.cursor() as cursor:
            cursor.execute(_CREATE_AGENT, {"agent": agent, "max_active": max_active})
            (outcome,) = cursor.fetchone()
            if outcome == "repeat":  # committed: it stays there to be read
                cursor.execute(_BY_IDEMPOTENCY_KEY, values)
                return _agent_row(cursor.fetchone()), False
        return None, outcome == "limited"


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


def _once_more_if_dropped(read: Callable[[], T]) -> T:
    """Run a read, and once more if the server had dropped its connection.

    What pool_pre_ping did on every checkout, for reads only: a backend terminated a
    moment ago still passes the checkout check (its socket closes when it exits), and
    a read may simply run again on a fresh connection. A write may not: whether it
    committed before its connection broke is unknown, so its caller hears of it.
    """
    try:
        return read()
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    return read()
