"""internal_error: the stop reason of an agent failed by a bug of the system's own

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 20:30:00

The stop_reason check learns `internal_error`. As in 0010: on PostgreSQL the check is
dropped and made again; on SQLite its text is changed in the schema itself (SQLite
cannot alter a check, and rebuilding `agents` would cascade to every step and webhook).
"""

import re

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

NAME = 'ck_agents_stop_reason_known'
VALUE = 'internal_error'


def upgrade() -> None:
    _check(add=True)


def downgrade() -> None:
    # The older schema knows no such reason: the nearest it has, a failed run.
    op.execute(sa.text("UPDATE agents SET stop_reason = 'model_error' "
                       "WHERE stop_reason = 'internal_error'"))
    _check(add=False)


def _check(*, add: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        _sqlite_check(bind, add=add)
        return
    current = bind.execute(sa.text(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"),
        {"name": NAME}).scalar_one()
    op.drop_constraint(op.f(NAME), 'agents', type_='check')
    op.create_check_constraint(op.f(NAME), 'agents', _changed(current, add=add))


def _changed(definition: str, *, add: bool) -> str:
    """The check's condition with VALUE added to (or taken from) its list of values."""
    values = [v for v in re.findall(r"'([^']*)'", definition) if v != VALUE]
    values += [VALUE] if add else []
    listed = ", ".join(f"'{v}'" for v in values)
    return f"stop_reason IS NULL OR stop_reason IN ({listed})"


def _sqlite_check(bind, *, add: bool) -> None:  # type: ignore[no-untyped-def]
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'agents'").scalar_one()
    # One constraint a line, as SQLAlchemy wrote the table: `CONSTRAINT … CHECK (…), `.
    pattern = re.compile(rf"^(\s*CONSTRAINT {NAME} CHECK \()(.*)(\),?\s*)$", re.MULTILINE)
    match = pattern.search(sql)
    if match is None:
        raise RuntimeError(f"no check {NAME} in the agents table's schema")
    sql = sql[:match.start(2)] + _changed(match.group(2), add=add) + sql[match.end(2):]
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'agents'", (sql,))
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")
