"""users.revoked_at: a user whose key was revoked (`jarvis-agents users revoke`)

Revision ID: 0005
Revises: 0002
Create Date: 2026-12-01 10:00:00

A revoked user's key finds nobody; `users rotate` gives a new key and clears it.
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('users', sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite ≥ 3.35), not batch mode: rebuilding `users` on SQLite
    # would drop the table, and with foreign keys on, every agent with it (ON DELETE CASCADE).
    op.drop_column('users', 'revoked_at')
