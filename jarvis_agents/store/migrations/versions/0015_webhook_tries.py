"""webhook_deliveries: when the last failed try began, and how long it took

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03 09:00:00

A try lasts at most its deadline, however the receiver trickles (README, Webhooks):
`last_try_at` and `last_try_ms`, beside `last_error`, say when the last failed try
began and how long it took. Plain ADD COLUMNs, nullable.
"""

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('webhook_deliveries',
                  sa.Column('last_try_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('webhook_deliveries', sa.Column('last_try_ms', sa.Integer(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMNs (SQLite ≥ 3.35), not batch mode: see 0005.
    for column in ('last_try_ms', 'last_try_at'):
        op.drop_column('webhook_deliveries', column)
