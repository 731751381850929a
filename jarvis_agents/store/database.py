"""Engines and migrations: one place that knows how to open the database."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Dialect, Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

from jarvis_agents.errors import DependencyUnavailable, first_line

MIGRATIONS = Path(__file__).parent / "migrations"
# A pooled PostgreSQL connection idle for longer than this is pinged before use.
IDLE_PING_S = 10.0


def make_engine(database_url: str, *, pool_size: int = 10, overflow: bool = True) -> Engine:
    """An engine with bounded waits: no query, connect or pool checkout blocks forever.

    With `overflow`, a burst may open half again as many PostgreSQL connections, each
    closed when it comes back to a full pool; without, callers wait for one of
    `pool_size` (a worker's 200 threads, which would otherwise open and close
    connections all the time).
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=pool_size,
            max_overflow=pool_size if overflow else 0,
            pool_timeout=30,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(
        url,
        pool_size=pool_size,
        # A burst may borrow half again; past that, callers wait for a connection
        # (pool_timeout) rather than push PostgreSQL past its max_connections.
        max_overflow=pool_size // 2 if overflow else 0,
        pool_timeout=30,
        # Not pool_pre_ping: a round trip on every checkout; see _check_on_checkout.
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args={
            "connect_timeout": 5,
            # A statement that hangs (a lock held by a dead session) fails instead.
            "options": "-c statement_timeout=30000 -c lock_timeout=10000",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        },
    )
    _check_on_checkout(engine)
    return engine


def _check_on_checkout(engine: Engine) -> None:
    """Hand out no pooled connection the server has closed, without a ping per checkout.

    A restart or a terminated backend writes its last words on an idle connection and
    closes it: reading what is there costs no round trip (`_closed_by_server`). Only
    a connection found that way, or idle for more than IDLE_PING_S (the socket may
    have died silently), is pinged; a failed ping makes the pool reconnect it.
    """
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def stamp(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def check(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is not None:  # None: fresh from connect()
            check_idle(dialect, dbapi_connection, idle_since)


def check_idle(dialect: Dialect, dbapi_connection: Any, idle_since: float) -> None:
    """Raise DisconnectionError if a connection idle since `idle_since` (time.monotonic())
    is dead: a read of what the server sent tells, a ping only past IDLE_PING_S."""
    error = dialect.loaded_dbapi.Error
    if time.monotonic() - idle_since < IDLE_PING_S and not _closed_by_server(dbapi_connection, error):
        return
    try:
        dialect.do_ping(dbapi_connection)
    except error as exc:
        raise DisconnectionError(f"a pooled connection was dead: {first_line(exc)}") from exc


def _closed_by_server(dbapi_connection: Any, error: type[Exception]) -> bool:
    """Whether the server has closed an idle psycopg2 connection, read without waiting.

    psycopg2's `poll()` takes in what the server sent meanwhile (libpq reads the socket
    itself, whether or not gevent patched `select`: the API's process). A backend that
    was terminated or restarted sent its last words, taken as a notice by the first
    read, and closed the connection, which the second read reports as an error.
    """
    if dbapi_connection.closed:
        return True
    try:
        dbapi_connection.poll()
        dbapi_connection.poll()
    except error:  # the connection is gone
        return True
    return bool(dbapi_connection.closed)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    # WAL lets the API read while a worker writes; foreign keys are off by default.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # Alembic's ini interpolation treats % specially.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str) -> str:
    """Apply every migration (idempotent); returns the revision now in force."""
    engine = make_engine(database_url, pool_size=1)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                # Batch mode rebuilds a table (copy, drop, rename): with foreign keys on,
                # dropping `agents` would delete every row that refers to it. The pragma
                # only takes effect outside a transaction, so before the BEGIN.
                connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
                connection.commit()  # ends SQLAlchemy's autobegun (empty) transaction
            with connection.begin():
                config = alembic_config(database_url)
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
            if engine.dialect.name == "sqlite":
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()
        with engine.connect() as connection:
            row = connection.exec_driver_sql("SELECT version_num FROM alembic_version").first()
            return row[0] if row else "base"
    except OperationalError as exc:
        raise DependencyUnavailable(
            f"cannot reach the database at {make_url(database_url).render_as_string()}: "
            f"{first_line(exc.orig)}"
        ) from None
    finally:
        engine.dispose()


def is_migrated(engine: Engine) -> bool:
    return inspect(engine).has_table("agents")
