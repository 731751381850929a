"""Persistence: the schema, its migrations and the store (store/interface.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jarvis_agents.errors import DependencyUnavailable

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from jarvis_agents.config import Settings
    from jarvis_agents.store.repository import Repository


def repository_for(engine: Engine) -> Repository:
    """The store on this engine: the PostgreSQL one on PostgreSQL, else the portable one."""
    if engine.dialect.name == "postgresql":
        from jarvis_agents.store.postgres import PostgresRepository

        return PostgresRepository(engine)
    from jarvis_agents.store.repository import Repository

    return Repository(engine)


def open_repository(
    settings: Settings, *, pool_size: int = 10, overflow: bool = True, check: bool = True
) -> Repository:
    """A repository on the configured database; with `check`, fails clearly if unmigrated.
    `pool_size` and `overflow` are `store.database.make_engine`'s."""
    from sqlalchemy.exc import OperationalError

    from jarvis_agents.store.database import is_migrated, make_engine

    engine = make_engine(settings.database_url, pool_size=pool_size, overflow=overflow)
    if check:
        try:
            migrated = is_migrated(engine)
        except OperationalError as exc:
            engine.dispose()
            first = str(exc.orig).strip().splitlines()[0] if exc.orig else "unreachable"
            raise DependencyUnavailable(f"cannot reach the database: {first}") from None
        if not migrated:
            engine.dispose()
            raise DependencyUnavailable(
                "the database has no schema yet; run `jarvis-agents db upgrade` first"
            )
    return repository_for(engine)
