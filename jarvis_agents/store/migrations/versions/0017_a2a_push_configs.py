"""a2a_push_configs, and webhook_deliveries.headers: A2A push notifications

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 22:00:00

An A2A task's push notification configs (README, A2A), and the headers of its own a
delivery sends (the config's token): its pushes go through the webhook outbox. A plain
ADD COLUMN, nullable: a process of the previous version owes deliveries without it.
"""

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'a2a_push_configs',
        sa.Column('agent_id', sa.Uuid(), nullable=False),
        sa.Column('id', sa.String(length=256), nullable=False),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('token', sa.Text(), nullable=True),
        sa.Column('auth_scheme', sa.String(length=64), nullable=True),
        sa.Column('auth_credentials', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['agent_id'], ['agents.id'],
                                name=op.f('fk_a2a_push_configs_agent_id_agents'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('agent_id', 'id', name=op.f('pk_a2a_push_configs')),
    )
    op.add_column('webhook_deliveries', sa.Column('headers', sa.Text(), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite ≥ 3.35), not batch mode: see 0005.
    op.drop_column('webhook_deliveries', 'headers')
    op.drop_table('a2a_push_configs')
