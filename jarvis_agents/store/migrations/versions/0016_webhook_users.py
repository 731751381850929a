"""webhook_deliveries.user_id: whose each delivery is, so that users share the senders

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03 10:00:00

The agent's user, copied into its delivery when the delivery is owed, lets the
dispatchers take the users' due deliveries in turns (README, Webhooks); the deliveries
still owed are given theirs here. A plain ADD COLUMN, nullable: an API process of the
previous version, which may run through the migration, still owes deliveries without it.
"""

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('webhook_deliveries', sa.Column('user_id', sa.Uuid(), nullable=True))
    op.execute(
        "UPDATE webhook_deliveries SET user_id = "
        "(SELECT agents.user_id FROM agents WHERE agents.id = webhook_deliveries.agent_id) "
        "WHERE delivered_at IS NULL AND abandoned_at IS NULL"
    )


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite ≥ 3.35), not batch mode: see 0005.
    op.drop_column('webhook_deliveries', 'user_id')
