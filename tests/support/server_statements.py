"""What a PostgreSQL server ran, as the server counts it (pg_stat_statements).

A SQLAlchemy event listener sees only what runs through SQLAlchemy; the store's hot
statements run prepared on DBAPI cursors (store/connections.py), which it never
sees. The server sees them all. pg_stat_statements must be loaded when the server
starts, which the shared server's configuration does not do (and it is never
restarted): a test that counts runs a cluster of its own (`counting_postgres`).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text

from tests.faults.own_servers import own_postgres


class ServerStatements:
    """The statements run on one database of the server, by their normalized text."""

    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url, isolation_level="AUTOCOMMIT")
        with self.engine.connect() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))

    def calls(self) -> Counter[str]:
        """How many times each statement has run so far (a PREPAREd one under the
        text of its PREPARE); the counts' own reads left out."""
        with self.engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT query, calls FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND query NOT LIKE '%pg_stat_statements%'")).all()
        counts: Counter[str] = Counter()
        for query, calls in rows:
            counts[query] += calls
        return counts

    def close(self) -> None:
        self.engine.dispose()


@contextmanager
def counting_postgres() -> Iterator[tuple[str, ServerStatements]]:
    """A migrated database on a PostgreSQL cluster of the caller's own that counts its
    statements: (its URL, its counts)."""
    from jarvis_agents.store.database import upgrade

    with own_postgres({"shared_preload_libraries": "pg_stat_statements"}) as server:
        url = server.create_database(f"jarvis_{uuid.uuid4().hex[:8]}")
        upgrade(url)
        statements = ServerStatements(url)
        try:
            yield url, statements
        finally:
            statements.close()
