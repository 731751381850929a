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

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

STOP_REASONS = ("'final_answer', 'max_steps', 'total_timeout', 'step_timeout', 'model_error', "
                "'worker_lost', 'cancelled'")


def upgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('mode', sa.String(length=8), server_default='auto', nullable=False))
        batch_op.add_column(sa.Column('input_tokens', sa.BigInteger(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('output_tokens', sa.BigInteger(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('model_calls', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('output_schema', sa.JSON(none_as_null=True), nullable=True))
        batch_op.add_column(sa.Column('output', sa.JSON(none_as_null=True), nullable=True))
        batch_op.create_check_constraint(
            op.f('ck_agents_mode_known'), "mode IN ('auto', 'native', 'react')")
        batch_op.drop_constraint(op.f('ck_agents_stop_reason_known'), type_='check')
        batch_op.create_check_constraint(
            op.f('ck_agents_stop_reason_known'),
            f"stop_reason IS NULL OR stop_reason IN ({STOP_REASONS}, 'invalid_output')")
    with op.batch_alter_table('agent_steps', schema=None) as batch_op:
        batch_op.add_column(sa.Column('call_id', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('input_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('output_tokens', sa.Integer(), nullable=True))
        batch_op.drop_constraint('uq_agent_steps_agent_step_type', type_='unique')
    op.execute("UPDATE agent_steps SET call_id = 'call_' || CAST(step AS VARCHAR(12))"
               " WHERE type IN ('ACT', 'OBSERVE')")
    op.create_index('uq_agent_steps_agent_step_type_call', 'agent_steps',
                    ['agent_id', 'step', 'type', sa.text("coalesce(call_id, '')")], unique=True)


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
