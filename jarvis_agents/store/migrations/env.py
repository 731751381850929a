"""Alembic environment: runs on the connection `database.upgrade` hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from jarvis_agents.store import langgraph_tables  # noqa: F401 - its tables join Base's metadata
from jarvis_agents.store.models import Base
from jarvis_agents.store.schedules import ScheduleRow  # noqa: F401 - its table joins the metadata

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # the `alembic` command line, for developers
        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.begin() as connection:
            _run(connection)
        engine.dispose()
    else:
        _run(connection)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    # Batch mode lets later ALTERs work on SQLite, which rebuilds the table.
    context.configure(
        connection=connection, target_metadata=target_metadata, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
