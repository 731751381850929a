"""Users and their API keys: create, find by key, list, revoke, rotate.

A key is shown once and stored only as its SHA-256: keys are 256-bit random tokens,
so a fast hash is enough and finds a user with one indexed lookup. A revoked user's
key finds nobody; rotating stores the new key's hash in place of the old one (and
lets a revoked user back in), so the old key finds nobody from the commit on. The
API keeps what it found for a moment (jarvis_agents/accounts.py), which bounds how
long a revoked or replaced key is still taken.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Executable, insert, select, update
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import Conflict, NotFound
from jarvis_agents.lifecycle import isoformat, utcnow
from jarvis_agents.store.models import UserRow, as_utc

users = UserRow.__table__
COLUMNS = (users.c.id, users.c.name, users.c.created_at, users.c.revoked_at)

API_KEY_PREFIX = "jrv_"
HASHES_PER_QUERY = 1000  # bounds a statement's size


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    name: str
    created_at: datetime
    revoked_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.id), "name": self.name, "created_at": isoformat(self.created_at),
            "revoked_at": isoformat(self.revoked_at),
        }


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


class Users:
    """The users table, through the repository's way of reading and writing."""

    def __init__(
        self,
        *,
        read: Callable[[Executable], Sequence[RowMapping]],
        one_statement: Callable[[], AbstractContextManager[Connection]],
    ) -> None:
        self._read = read
        self._one_statement = one_statement

    def create(self, name: str) -> tuple[User, str]:
        """Create a user and return it with its API key (shown once, stored hashed)."""
        api_key = new_api_key()
        user = User(id=uuid.uuid4(), name=name, created_at=utcnow())
        try:
            with self._one_statement() as conn:
                conn.execute(
                    insert(users).values(
                        id=user.id, name=name, api_key_hash=hash_api_key(api_key),
                        created_at=user.created_at,
                    )
                )
        except IntegrityError:
            raise Conflict(f"a user named {name!r} already exists", code="user_exists") from None
        return user, api_key

    def by_api_key(self, api_key: str) -> User | None:
        """The user this key belongs to; None for an unknown, replaced or revoked key."""
        return self.by_key_hash(hash_api_key(api_key))

    def by_key_hash(self, key_hash: str) -> User | None:
        """`by_api_key`, given the key's hash (`hash_api_key`)."""
        found = self._select(users.c.api_key_hash == key_hash)
        return found[0] if found and found[0].revoked_at is None else None

    def live_key_hashes(self, key_hashes: Sequence[str]) -> set[str]:
        """Of these key hashes, those that still let their user in (neither replaced nor
        revoked): one indexed query per HASHES_PER_QUERY."""
        live: set[str] = set()
        for start in range(0, len(key_hashes), HASHES_PER_QUERY):
            live.update(row["api_key_hash"] for row in self._read(
                select(users.c.api_key_hash).where(
                    users.c.api_key_hash.in_(key_hashes[start : start + HASHES_PER_QUERY]),
                    users.c.revoked_at.is_(None))))
        return live

    def by_name(self, name: str) -> User | None:
        found = self._select(users.c.name == name)
        return found[0] if found else None

    def all(self) -> list[User]:
        """Every user, revoked ones included, oldest first."""
        return self._select(None)

    def revoke(self, name: str) -> User:
        """Refuse the user's key from now on; NotFound or Conflict (already revoked)."""
        with self._one_statement() as conn:
            row = conn.execute(
                update(users)
                .where(users.c.name == name, users.c.revoked_at.is_(None))
                .values(revoked_at=utcnow())
                .returning(*COLUMNS)
            ).mappings().first()
        if row is not None:
            return _user(row)
        user = self.by_name(name)
        if user is None:
            raise NotFound(f"there is no user named {name!r}")
        raise Conflict(
            f"user {name!r} was already revoked at {isoformat(user.revoked_at)}",
            code="user_revoked",
        )

    def rotate(self, name: str) -> tuple[User, str]:
        """Give the user a new API key in place of the old one (a revoked user too)."""
        api_key = new_api_key()
        with self._one_statement() as conn:
            row = conn.execute(
                update(users)
                .where(users.c.name == name)
                .values(api_key_hash=hash_api_key(api_key), revoked_at=None)
                .returning(*COLUMNS)
            ).mappings().first()
        if row is None:
            raise NotFound(f"there is no user named {name!r}")
        return _user(row), api_key

    def _select(self, condition: ColumnElement[bool] | None) -> list[User]:
        query = select(*COLUMNS).order_by(users.c.created_at, users.c.name)
        if condition is not None:
            query = query.where(condition)
        return [_user(row) for row in self._read(query)]


def _user(row: RowMapping) -> User:
    return User(row["id"], row["name"], as_utc(row["created_at"]), as_utc(row["revoked_at"]))
