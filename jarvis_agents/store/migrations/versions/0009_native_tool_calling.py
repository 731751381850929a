"""Native tool calling, usage and structured answers: agents.mode, usage counters,
output_schema and output; a call_id and a model call's tokens on steps

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 12:00:00

Several tool calls in one iteration are several ACT/OBSERVE pairs, so an iteration
is unique by (step, type, call_id) instead of (step, type). The ACT and OBSERVE rows
written before this migration get a call_id made from their iteration, which pairs
them as before. Usage starts at 0 for existing agents: their calls were not counted.
"""

import re

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

STOP_REASONS = ("'final_answer', 'max_steps', 'total_timeout', 'step_timeout', 'model_error', "
                "'worker_lost', 'cancelled'")


def upgrade() -> None:
    # Plain ADD COLUMNs: rebuilding `agents` on SQLite (batch mode) drops the table, and
    # with foreign keys on, every step and webhook of every agent with it (ON DELETE
    # CASCADE). `agent_steps` is referenced by nothing, so its rebuild below is safe.
    op.add_column('agents', sa.Column('mode', sa.String(length=8), server_default='auto', nullable=False))
    op.add_column('agents', sa.Column('input_tokens', sa.BigInteger(), server_default='0', nullable=False))
    op.add_column('agents', sa.Column('output_tokens', sa.BigInteger(), server_default='0', nullable=False))
    op.add_column('agents', sa.Column('model_calls', sa.Integer(), server_default='0', nullable=False))
    op.add_column('agents', sa.Column('output_schema', sa.JSON(none_as_null=True), nullable=True))
    op.add_column('agents', sa.Column('output', sa.JSON(none_as_null=True), nullable=True))
    mode_known = "mode IN ('auto', 'native', 'react')"
    stop_reason_known = f"stop_reason IS NULL OR stop_reason IN ({STOP_REASONS}, 'invalid_output')"
    if op.get_bind().dialect.name == 'sqlite':
        _sqlite_agents_checks(mode_known, stop_reason_known)
    else:
        op.create_check_constraint(op.f('ck_agents_mode_known'), 'agents', mode_known)
        op.drop_constraint(op.f('ck_agents_stop_reason_known'), 'agents', type_='check')
        op.create_check_constraint(op.f('ck_agents_stop_reason_known'), 'agents', stop_reason_known)
    with op.batch_alter_table('agent_steps', schema=None) as batch_op:
        batch_op.add_column(sa.Column('call_id', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('input_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('output_tokens', sa.Integer(), nullable=True))
        batch_op.drop_constraint('uq_agent_steps_agent_step_type', type_='unique')
    op.execute("UPDATE agent_steps SET call_id = 'call_' || CAST(step AS VARCHAR(12))"
               " WHERE type IN ('ACT', 'OBSERVE')")
    op.create_index('uq_agent_steps_agent_step_type_call', 'agent_steps',
                    ['agent_id', 'step', 'type', sa.text("coalesce(call_id, '')")], unique=True)


def _sqlite_agents_checks(mode_known: str, stop_reason_known: str) -> None:
    """The checks of `agents` changed in SQLite's schema itself, which SQLite's ALTER TABLE
    documentation describes for changes that every stored row still meets."""
    bind = op.get_bind()
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'agents'").scalar_one()
    line = re.compile(r"^(\s*CONSTRAINT ck_agents_stop_reason_known CHECK \()(.*)(\),?\s*)$",
                      re.MULTILINE)
    match = line.search(sql)
    if match is None:
        raise RuntimeError("no check ck_agents_stop_reason_known in the agents table's schema")
    indent = match.group(1)[:len(match.group(1)) - len(match.group(1).lstrip())]
    sql = (sql[:match.start()] + f"{match.group(1)}{stop_reason_known}), \n"
           f"{indent}CONSTRAINT ck_agents_mode_known CHECK ({mode_known}){match.group(3).lstrip(')')}"
           + sql[match.end():])
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'agents'", (sql,))
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def downgrade() -> None:
    op.drop_index('uq_agent_steps_agent_step_type_call', table_name='agent_steps')
    with op.batch_alter_table('agent_steps', schema=None) as batch_op:
        batch_op.create_unique_constraint('uq_agent_steps_agent_step_type', ['agent_id', 'step', 'type'])
        batch_op.drop_column('output_tokens')
        batch_op.drop_column('input_tokens')
        batch_op.drop_column('call_id')
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_agents_stop_reason_known'), type_='check')
        batch_op.create_check_constraint(
            op.f('ck_agents_stop_reason_known'), f"stop_reason IS NULL OR stop_reason IN ({STOP_REASONS})")
        batch_op.drop_constraint(op.f('ck_agents_mode_known'), type_='check')
        batch_op.drop_column('output')
        batch_op.drop_column('output_schema')
        batch_op.drop_column('model_calls')
        batch_op.drop_column('output_tokens')
        batch_op.drop_column('input_tokens')
        batch_op.drop_column('mode')
