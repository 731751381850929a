"""webhook_deliveries: the webhooks owed, written with the status change that owes them

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 06:34:10

A transactional outbox (docs/api.md §3, §9): a delivery is a row committed in the same
transaction as the agent's terminal status, and the dispatchers in the workers send
what is due, with the retry schedule kept in the row.
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

OWED = sa.text('delivered_at IS NULL AND abandoned_at IS NULL')


def upgrade() -> None:
    op.create_table('webhook_deliveries',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('agent_id', sa.Uuid(), nullable=False),
    sa.Column('event', sa.String(length=32), nullable=False),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('payload', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('abandoned_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("event IN ('agent.completed', 'agent.failed', 'agent.cancelled', 'agent.waiting')", name=op.f('ck_webhook_deliveries_event_known')),
    sa.CheckConstraint('attempts >= 0', name=op.f('ck_webhook_deliveries_attempts_not_negative')),
    sa.CheckConstraint('delivered_at IS NULL OR abandoned_at IS NULL', name=op.f('ck_webhook_deliveries_delivered_or_abandoned')),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], name=op.f('fk_webhook_deliveries_agent_id_agents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_deliveries'))
    )
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_webhook_deliveries_agent_id'), ['agent_id'], unique=False)
        batch_op.create_index('ix_webhook_deliveries_owed', ['next_at'], unique=False,
                              postgresql_where=OWED, sqlite_where=OWED)


def downgrade() -> None:
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_webhook_deliveries_owed')
        batch_op.drop_index(batch_op.f('ix_webhook_deliveries_agent_id'))
    op.drop_table('webhook_deliveries')
