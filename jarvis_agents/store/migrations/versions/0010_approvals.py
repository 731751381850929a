"""approvals: the WAITING status, what an agent waits on and the answers

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 11:30:00

agents gains `approve_tools` (the tools whose calls wait for a person), `waiting_for`
(the call waited on while WAITING), `approval` (the latest answer) and `waited_ms`
(time spent WAITING, which the total timeout leaves out); the status and stop_reason
checks learn WAITING and `approval_timeout`. (Steps' `call_id` comes with 0009.)

Plain ADD COLUMNs. On PostgreSQL the two checks are dropped and made again. SQLite
cannot alter a check, and rebuilding `agents` (batch mode) would drop the table, and
with foreign keys on, every step and webhook of every agent with it (ON DELETE
CASCADE); so on SQLite the checks' text is changed in the schema itself, as SQLite's
ALTER TABLE documentation describes for changes that leave the stored rows valid.
"""

import re

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

STATUS = 'ck_agents_status_known'
STOP_REASON = 'ck_agents_stop_reason_known'
NEW_VALUES = {STATUS: 'WAITING', STOP_REASON: 'approval_timeout'}


def upgrade() -> None:
    op.add_column('agents', sa.Column('approve_tools', sa.JSON(), nullable=True))
    op.add_column('agents', sa.Column('waiting_for', sa.JSON(), nullable=True))
    op.add_column('agents', sa.Column('approval', sa.JSON(), nullable=True))
    op.add_column('agents', sa.Column('waited_ms', sa.Integer(), server_default='0', nullable=False))
    _checks(add=True)


def downgrade() -> None:
    _checks(add=False)
    for column in ('waited_ms', 'approval', 'waiting_for', 'approve_tools'):
        op.drop_column('agents', column)  # plain DROP COLUMN (SQLite ≥ 3.35), as in 0005


def _checks(*, add: bool) -> None:
    """Each check's value list with its new value added (or taken out again)."""
    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        _sqlite_checks(bind, add=add)
        return
    for name, value in NEW_VALUES.items():
        column = 'status' if name == STATUS else 'stop_reason'
        current = bind.execute(sa.text(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"),
            {"name": name}).scalar_one()
        op.drop_constraint(op.f(name), 'agents', type_='check')
        op.create_check_constraint(op.f(name), 'agents', _changed(current, column, value, add=add))


def _changed(definition: str, column: str, value: str, *, add: bool) -> str:
    """The check's condition with `value` added to (or taken from) its list of values."""
    values = re.findall(r"'([^']*)'", definition)
    values = [v for v in values if v != value] + ([value] if add else [])
    listed = ", ".join(f"'{v}'" for v in values)
    condition = f"{column} IN ({listed})"
    return condition if column == 'status' else f"{column} IS NULL OR {condition}"


def _sqlite_checks(bind, *, add: bool) -> None:  # type: ignore[no-untyped-def]
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'agents'").scalar_one()
    for name, value in NEW_VALUES.items():
        column = 'status' if name == STATUS else 'stop_reason'
        # One constraint a line, as SQLAlchemy wrote the table: `CONSTRAINT … CHECK (…), `.
        pattern = re.compile(rf"^(\s*CONSTRAINT {name} CHECK \()(.*)(\),?\s*)$", re.MULTILINE)
        match = pattern.search(sql)
        if match is None:
            raise RuntimeError(f"no check {name} in the agents table's schema")
        sql = sql[:match.start(2)] + _changed(match.group(2), column, value, add=add) + sql[match.end(2):]
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'agents'", (sql,))
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")
