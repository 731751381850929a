"""How the repository reaches the database: SQLAlchemy connections for the statements
that are not hot, DBAPI cursors for the prebuilt ones (store/compiled.py), which on
PostgreSQL run each statement prepared (store/prepared.py).

On PostgreSQL a statement that stands alone runs in autocommit: one round trip, with
no BEGIN and COMMIT (or ROLLBACK after a read) around it. On SQLite it runs in a
transaction of its own. Errors come out as SQLAlchemy's (IntegrityError,
OperationalError, …) either way, which is all the callers know.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine, Executable, event
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.pool import PoolProxiedConnection

from jarvis_agents.store.compiled import Prebuilt
from jarvis_agents.store.database import check_idle, make_engine
from jarvis_agents.store.prepared import Prepared

T = TypeVar("T")


def raw_connection(engine: Engine) -> PoolProxiedConnection:
    """`engine.raw_connection()`, with a failure to connect raised as SQLAlchemy's error
    (OperationalError, …), as `engine.connect()` raises it, not the driver's: callers
    (the API's 503, the worker's retries) know only SQLAlchemy's."""
    error = engine.dialect.loaded_dbapi.Error
    try:
        return engine.raw_connection()
    except error as exc:
        raise DBAPIError.instance(None, None, exc, error, dialect=engine.dialect) from exc


class Connections:
    """Connections and cursors on one engine, in autocommit where the database has it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect
        self.error = engine.dialect.loaded_dbapi.Error
        self.autocommit = engine.dialect.name == "postgresql"
        self.prepared = Prepared(self.error) if self.autocommit else None

    @contextmanager
    def one_statement(self) -> Iterator[Connection]:
        """A SQLAlchemy connection for writes that stand alone: autocommit on
        PostgreSQL, a transaction around them on SQLite.

        Not `execution_options(isolation_level="AUTOCOMMIT")`: its reset on return
        makes psycopg2 send `SET default_transaction_isolation` every time.
        """
        if not self.autocommit:
            with self.engine.begin() as conn:
                yield conn
            return
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

    def read(self, statement: Executable) -> list[RowMapping]:
        """The rows of a read (run again if its connection had just died)."""
        def run() -> list[RowMapping]:
            with self.one_statement() as conn:
                return list(conn.execute(statement).mappings().all())

        return once_more_if_dropped(run)

    @contextmanager
    def cursor(self) -> Iterator[Cursor]:
        """A DBAPI cursor on a pooled connection, whose statements commit when they
        end: autocommit on PostgreSQL, a commit when the block ends on SQLite. A
        connection that broke is not pooled again."""
        pooled = raw_connection(self.engine)
        try:
            with self.cursor_on(pooled) as cursor:
                yield cursor
        finally:
            if pooled.dbapi_connection is not None:  # None: broken, and invalidated
                if self.autocommit:
                    pooled.dbapi_connection.autocommit = False
                pooled.close()

    @contextmanager
    def cursor_on(self, pooled: PoolProxiedConnection) -> Iterator[Cursor]:
        """A cursor as `cursor`'s on `pooled`, which is invalidated if it broke.

        A transaction the caller left open (an exception, an early return) is rolled
        back here.
        """
        connection = pooled.dbapi_connection
        broken = False
        try:
            if self.autocommit:
                connection.autocommit = True
            cursor = connection.cursor()
            try:
                yield Cursor(cursor, pooled.info, self.prepared)
                if not self.autocommit:
                    connection.commit()
            finally:
                cursor.close()
        except self.error as exc:
            broken = self.dialect.is_disconnect(exc, connection, None)
            raise DBAPIError.instance(
                None, None, exc, self.error, connection_invalidated=broken, dialect=self.dialect
            ) from exc
        finally:
            if not broken:
                broken = not self._left_idle(connection)
            if broken:
                pooled.invalidate()  # closes it, and returns its place to the pool

    def _left_idle(self, connection: Any) -> bool:
        """Roll back what the connection has open; False if it cannot be used again."""
        try:
            if not self.autocommit:
                connection.rollback()  # a no-op after the commit
                return True
            from psycopg2.extensions import TRANSACTION_STATUS_IDLE

            if connection.closed:
                return False
            if connection.get_transaction_status() != TRANSACTION_STATUS_IDLE:
                with connection.cursor() as cursor:
                    cursor.execute("ROLLBACK")
        except self.error:
            return False
        return True

    # --- prebuilt statements ---------------------------------------------------------

    def one(
        self, statement: Prebuilt, values: Mapping[str, Any], *, durable: bool = True
    ) -> dict[str, Any] | None:
        """The row a prebuilt write returns (or None), committed.

        `durable=False` lets the commit return before its WAL reaches the disk, for a
        write whose loss a later durable write of the same agent would reveal and
        repair (the claim's; see Repository.claim).
        """
        compiled = statement.on(self.dialect)
        # Two statements in one simple query: one implicit transaction, one round trip.
        prefix = "SET LOCAL synchronous_commit = off; " if not durable and self.autocommit else ""
        with self.cursor() as cursor:
            cursor.execute(compiled.sql, compiled.parameters(values), prefix=prefix)
            raw = cursor.fetchone()
        return compiled.row(raw) if raw is not None else None

    def rows(self, statement: Prebuilt, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The rows of a prebuilt read (run again if its connection had just died)."""
        compiled = statement.on(self.dialect)
        params = compiled.parameters(values)

        def run() -> Sequence[Any]:
            with self.cursor() as cursor:
                cursor.execute(compiled.sql, params)
                return cursor.fetchall()

        return [compiled.row(raw) for raw in once_more_if_dropped(run)]


class Cursor:
    """A DBAPI cursor whose statements run prepared on its connection where they can
    (`prepared`: PostgreSQL's, store/prepared.py; None on SQLite: as given)."""

    def __init__(self, raw: Any, info: dict[str, Any], prepared: Prepared | None) -> None:
        self.raw, self.info, self.prepared = raw, info, prepared

    def execute(self, sql: str, params: Any = None, *, prefix: str = "") -> None:
        """Run `sql` with `params`, after `prefix` (statements of the same query)."""
        if self.prepared is None or not isinstance(params, dict):
            self.raw.execute(prefix + sql, params)
        else:
            self.prepared.execute(self.raw, self.info, sql, params, prefix=prefix)

    def fetchone(self) -> Any:
        return self.raw.fetchone()

    def fetchall(self) -> list[Any]:
        return self.raw.fetchall()


class HeldConnection:
    """A connection of its own for one user at a time, kept between uses.

    The step writes of a worker process go out one statement at a time (group commit,
    store/group_commit.py), so one connection serves them all. Kept open between
    writes, it saves what a pooled connection costs per write: the checkout and the
    check-in, with autocommit switched on and off around them, a sizeable part of a
    write made one agent at a time (BENCHMARKS.md, notes). It comes from a pool of one beside the caller's (opened at the first
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
            self._pooled = raw_connection(self._engine)
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


def once_more_if_dropped(read: Callable[[], T]) -> T:
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
