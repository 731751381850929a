"""Statements PostgreSQL parses and plans once per connection, not at every call.

psycopg2 sends each statement as text, which the server parses, rewrites and plans
every time; for the statements of every step and request, planning takes as much of
their server time as executing or more (most of all in reading an agent, whose step
count and usage are subqueries; BENCHMARKS.md). So on
PostgreSQL a cursor of ours (store/connections.py) runs each statement as
`EXECUTE name (…)`, after a `PREPARE name AS …` the first time that connection sees
it. The name is a hash of the text, so a backend that holds another version's
statement (a pooler's, kept across clients) is never asked to run it.

The parameters keep psycopg2's `%(name)s` form: in the prepared text each becomes
`$n`, and the EXECUTE passes the values in that order, each coerced by the server to
the type it inferred for `$n`. Where it cannot infer one (a bare `SELECT %(x)s`),
the PREPARE fails and the statement runs as plain text from then on. A server that
answers that it has no such statement (a pooler in transaction mode hands each
statement to any of its backends) gets plain text from then on, for every statement.
A statement whose result a migration changed under a running process (PostgreSQL
refuses to run it: "cached plan must not change result type") runs as text once and
is prepared afresh at its next use.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jarvis_agents.errors import first_line

log = logging.getLogger(__name__)

_PARAMETER = re.compile(r"%\((\w+)\)s")
_INFO_KEY = "jarvis_prepared"  # in a pooled connection's info: the names prepared on it
# A connection prepares at most this many statements (the transitions' texts vary
# with the columns they set; each repeats): past it, new ones run as plain text.
MAX_PER_CONNECTION = 200

_NO_SUCH_STATEMENT = "26000"  # invalid_sql_statement_name
_DUPLICATE_STATEMENT = "42P05"  # duplicate_prepared_statement
_RESULT_CHANGED = "0A000"  # "cached plan must not change result type"
# The PREPARE's own failures that plain text would not have: the server could not
# type a parameter from where it stands.
_UNTYPED = frozenset({"42P18", "42P08", "42804"})  # indeterminate, ambiguous, mismatch


@dataclass(frozen=True)
class Form:
    """A statement's prepared form."""

    name: str
    prepare: str  # PREPARE name AS the text, with $n for each parameter
    execute: str  # EXECUTE name (%(a)s, %(b)s, …), for psycopg2 to fill in


@lru_cache(maxsize=512)
def form_of(sql: str) -> Form:
    order: dict[str, int] = {}

    def numbered(match: re.Match[str]) -> str:
        return f"${order.setdefault(match.group(1), len(order) + 1)}"

    body = _PARAMETER.sub(numbered, sql).replace("%%", "%")
    name = "jarvis_" + hashlib.sha256(sql.encode()).hexdigest()[:16]
    arguments = ", ".join(f"%({parameter})s" for parameter in order)
    return Form(name, f"PREPARE {name} AS {body}",
                f"EXECUTE {name} ({arguments})" if order else f"EXECUTE {name}")


class Prepared:
    """Runs statements prepared on the connections of one engine, while the server keeps
    them (`enabled`)."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error  # the driver's base error
        self.enabled = True
        self._plain: set[str] = set()  # texts the server could not prepare

    def execute(self, cursor: Any, info: dict[str, Any], sql: str,
                params: dict[str, Any] | None, *, prefix: str = "") -> None:
        """Run `sql` with `params` on `cursor`, prepared on its connection (whose pool
        `info` it is), after `prefix` (statements of the same simple query) if any."""
        form = self._prepared(cursor, info, sql) if self.enabled and sql not in self._plain else None
        if form is None:
            cursor.execute(prefix + sql, params)
            return
        try:
            cursor.execute(prefix + form.execute, params)
        except self.error as exc:
            code = getattr(exc, "pgcode", None)
            # Either way nothing ran (autocommit, or the implicit transaction of a
            # simple query), so the plain text may run now.
            if code == _RESULT_CHANGED:
                # A migration changed a column this statement returns, under a process
                # that prepared it before: prepare it afresh at its next use.
                cursor.execute(f"DEALLOCATE {form.name}")
                info[_INFO_KEY].discard(form.name)
            elif code == _NO_SUCH_STATEMENT:  # a backend that never prepared it
                log.warning("the database lost a prepared statement (%s); a connection pooler "
                            "in transaction mode? Sending plain SQL from now on", first_line(exc))
                self.enabled = False
            else:
                raise
            cursor.execute(prefix + sql, params)

    def _prepared(self, cursor: Any, info: dict[str, Any], sql: str) -> Form | None:
        """`sql`'s form, prepared on the cursor's connection (now if need be); None when
        it runs as plain text instead."""
        names: set[str] = info.setdefault(_INFO_KEY, set())
        form = form_of(sql)
        if form.name in names:
            return form
        if len(names) >= MAX_PER_CONNECTION:
            return None
        try:
            cursor.execute(form.prepare)
        except self.error as exc:
            code = getattr(exc, "pgcode", None)
            if code != _DUPLICATE_STATEMENT:  # duplicate: a pooler's backend has it
                if code in _UNTYPED:
                    self._plain.add(sql)
                return None  # anything else, plain text raises again, as it would have
        names.add(form.name)
        return form
