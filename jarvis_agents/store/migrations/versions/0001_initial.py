"""initial schema: users, agents, agent_steps

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 21:53:59.328584
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('users',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('api_key_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('length(api_key_hash) = 64', name=op.f('ck_users_api_key_hash_is_sha256')),
    sa.CheckConstraint('length(trim(name)) > 0', name=op.f('ck_users_name_not_blank')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('api_key_hash', name=op.f('uq_users_api_key_hash')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name'))
    )
    op.create_table('agents',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=False),
    sa.Column('goal', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('max_steps', sa.Integer(), nullable=False),
    sa.Column('step_count', sa.Integer(), nullable=False),
    sa.Column('final_answer', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('stop_reason', sa.String(length=16), nullable=True),
    sa.Column('tools', sa.JSON(), nullable=True),
    sa.Column('webhook_url', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('task_id', sa.String(length=64), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('request_hash', sa.String(length=64), nullable=True),
    sa.CheckConstraint("(status = 'COMPLETED' AND final_answer IS NOT NULL) OR (status <> 'COMPLETED' AND final_answer IS NULL)", name=op.f('ck_agents_final_answer_iff_completed')),
    sa.CheckConstraint("(status = 'FAILED' AND error IS NOT NULL) OR (status <> 'FAILED' AND error IS NULL)", name=op.f('ck_agents_error_iff_failed')),
    sa.CheckConstraint("(status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND completed_at IS NOT NULL) OR (NOT status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND completed_at IS NULL)", name=op.f('ck_agents_completed_at_iff_terminal')),
    sa.CheckConstraint("(status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND stop_reason IS NOT NULL) OR (NOT status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND stop_reason IS NULL)", name=op.f('ck_agents_stop_reason_iff_terminal')),
    sa.CheckConstraint("status IN ('PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED')", name=op.f('ck_agents_status_known')),
    sa.CheckConstraint("status NOT IN ('RUNNING', 'COMPLETED', 'FAILED') OR started_at IS NOT NULL", name=op.f('ck_agents_started_when_run')),
    sa.CheckConstraint("stop_reason IS NULL OR stop_reason IN ('final_answer', 'max_steps', 'total_timeout', 'step_timeout', 'model_error', 'worker_lost', 'cancelled')", name=op.f('ck_agents_stop_reason_known')),
    sa.CheckConstraint('attempt >= 0', name=op.f('ck_agents_attempt_not_negative')),
    sa.CheckConstraint('length(trim(goal)) > 0 AND length(goal) <= 4000', name=op.f('ck_agents_goal_not_blank')),
    sa.CheckConstraint('max_steps BETWEEN 1 AND 50', name=op.f('ck_agents_max_steps_range')),
    sa.CheckConstraint('step_count >= 0 AND step_count <= max_steps', name=op.f('ck_agents_step_count_range')),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_agents_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agents')),
    sa.UniqueConstraint('user_id', 'idempotency_key', name='uq_agents_user_idempotency_key')
    )
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.create_index('ix_agents_status_heartbeat', ['status', 'heartbeat_at'], unique=False)
        batch_op.create_index('ix_agents_user_created', ['user_id', 'created_at', 'id'], unique=False)
        batch_op.create_index('ix_agents_user_status', ['user_id', 'status'], unique=False)

    op.create_table('agent_steps',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('agent_id', sa.Uuid(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('type', sa.String(length=16), nullable=False),
    sa.Column('tool', sa.String(length=100), nullable=True),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('duration_ms', sa.Integer(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.CheckConstraint("(type IN ('ACT', 'OBSERVE') AND tool IS NOT NULL) OR type NOT IN ('ACT', 'OBSERVE')", name=op.f('ck_agent_steps_tool_on_act_observe')),
    sa.CheckConstraint("type IN ('THINK', 'ACT', 'OBSERVE', 'FINAL', 'ERROR')", name=op.f('ck_agent_steps_type_known')),
    sa.CheckConstraint('duration_ms IS NULL OR duration_ms >= 0', name=op.f('ck_agent_steps_duration_not_negative')),
    sa.CheckConstraint('seq >= 1', name=op.f('ck_agent_steps_seq_positive')),
    sa.CheckConstraint('step >= 0', name=op.f('ck_agent_steps_step_not_negative')),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], name=op.f('fk_agent_steps_agent_id_agents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agent_steps')),
    sa.UniqueConstraint('agent_id', 'seq', name='uq_agent_steps_agent_seq'),
    sa.UniqueConstraint('agent_id', 'step', 'type', name='uq_agent_steps_agent_step_type')
    )


def downgrade() -> None:
    op.drop_table('agent_steps')
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_index('ix_agents_user_status')
        batch_op.drop_index('ix_agents_user_created')
        batch_op.drop_index('ix_agents_status_heartbeat')

    op.drop_table('agents')
    op.drop_table('users')
