"""Engines and migrations: one place that knows how to open the database."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from jarvis_agents.errors import DependencyUnavailable

MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(database_url: str, *, pool_size: int = 10) -> Engine:
    """An engine with bounded waits: no query, connect or pool checkout blocks forever."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_timeout=30,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size * 2,
        pool_timeout=30,
        pool_pre_ping=True,
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
        with engine.begin() as connection:
            config = alembic_config(database_url)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        with engine.connect() as connection:
            row = connection.exec_driver_sql("SELECT version_num FROM alembic_version").first()
            return row[0] if row else "base"
    except OperationalError as exc:
        raise DependencyUnavailable(
            f"cannot reach the database at {make_url(database_url).render_as_string()}: "
            f"{_first_line(exc.orig)}"
        ) from None
    finally:
        engine.dispose()


def is_migrated(engine: Engine) -> bool:
    return inspect(engine).has_table("agents")


def _first_line(exc: BaseException | None) -> str:
    text = str(exc or "").strip()
    return text.splitlines()[0] if text else type(exc).__name__
