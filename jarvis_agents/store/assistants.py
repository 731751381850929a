"""Assistants and their versions in SQL (jarvis_agents/assistants.py says what they are),
on SQLite and PostgreSQL alike: `repository.assistants`.

An assistant is found with its current version's configuration in one statement (a
join on the version's key), by its id (the primary key) or its name (the unique
(user_id, name) index): that is the one read an agent create with an assistant adds.
A new version moves the assistant's `version` up in the same transaction that inserts
it: on PostgreSQL the UPDATE locks the row, so two PATCHes at once make two versions
one after the other, never the same number twice.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, delete, insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import IntegrityError

from jarvis_agents.assistants import Assistant, AssistantConfig, AssistantVersion
from jarvis_agents.errors import Conflict
from jarvis_agents.store.connections import Connections
from jarvis_agents.store.models import AssistantRow, AssistantVersionRow, as_utc

assistants = AssistantRow.__table__
versions = AssistantVersionRow.__table__

_CURRENT = (
    select(assistants, versions.c.config)
    .join(versions, (versions.c.assistant_id == assistants.c.id)
          & (versions.c.version == assistants.c.version))
)


class AssistantRows:
    """The `assistants` and `assistant_versions` tables, every statement scoped to a user."""

    def __init__(self, engine: Engine, connections: Connections) -> None:
        self._engine = engine
        self._connections = connections

    def insert(self, assistant: Assistant) -> None:
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(assistants).values(
                    id=assistant.id, user_id=assistant.user_id, name=assistant.name,
                    version=assistant.version, created_at=assistant.created_at,
                    updated_at=assistant.updated_at))
                conn.execute(insert(versions).values(
                    assistant_id=assistant.id, version=assistant.version,
                    config=assistant.config.stored(), created_at=assistant.created_at))
        except IntegrityError:
            raise Conflict(f"you already have an assistant named {assistant.name!r}; change "
                           "it with PATCH, or choose another name", code="assistant_exists") from None

    def find(self, user_id: uuid.UUID, *, assistant_id: uuid.UUID | None = None,
             name: str | None = None) -> Assistant | None:
        which = assistants.c.id == assistant_id if assistant_id is not None else (
            assistants.c.name == name)
        rows = self._connections.read(_CURRENT.where(assistants.c.user_id == user_id, which))
        return _assistant(rows[0]) if rows else None

    def of_user(self, user_id: uuid.UUID) -> list[Assistant]:
        return self._select(assistants.c.user_id == user_id)

    def add_version(self, user_id: uuid.UUID, assistant_id: uuid.UUID,
                    config: AssistantConfig, *, now: datetime) -> Assistant | None:
        with self._engine.begin() as conn:
            row = conn.execute(
                update(assistants)
                .where(assistants.c.id == assistant_id, assistants.c.user_id == user_id)
                .values(version=assistants.c.version + 1, updated_at=now)
                .returning(*assistants.c)
            ).mappings().first()
            if row is None:
                return None
            conn.execute(insert(versions).values(
                assistant_id=assistant_id, version=row["version"], config=config.stored(),
                created_at=now))
        return _assistant({**row, "config": config.stored()})

    def delete(self, user_id: uuid.UUID, assistant_id: uuid.UUID) -> bool:
        with self._engine.begin() as conn:
            return conn.execute(delete(assistants).where(
                assistants.c.id == assistant_id, assistants.c.user_id == user_id)).rowcount == 1

    def versions(self, user_id: uuid.UUID, assistant_id: uuid.UUID) -> list[AssistantVersion]:
        rows = self._connections.read(
            select(versions, assistants.c.name)
            .join(assistants, assistants.c.id == versions.c.assistant_id)
            .where(assistants.c.id == assistant_id, assistants.c.user_id == user_id)
            .order_by(versions.c.version.desc()))
        return [AssistantVersion(row["assistant_id"], row["name"], row["version"],
                                 AssistantConfig.from_stored(row["config"]),
                                 as_utc(row["created_at"])) for row in rows]

    def _select(self, condition: ColumnElement[bool]) -> list[Assistant]:
        rows = self._connections.read(_CURRENT.where(condition).order_by(assistants.c.name))
        return [_assistant(row) for row in rows]


def _assistant(row: RowMapping | dict) -> Assistant:  # type: ignore[type-arg]
    return Assistant(
        id=row["id"], user_id=row["user_id"], name=row["name"], version=row["version"],
        config=AssistantConfig.from_stored(row["config"]), created_at=as_utc(row["created_at"]),
        updated_at=as_utc(row["updated_at"]),
    )
