"""agents.losses: the attempts whose worker was lost, apart from the hand-backs

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-02 07:00:00

`attempt` counts every claim and take-over, a take-over after a graceful hand-back
(SIGTERM) included; JARVIS_MAX_ATTEMPTS counts only the workers lost. Existing
agents start at 0: a RUNNING agent's earlier losses cannot be told from its
hand-backs any more, so it gets the full allowance again.
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('agents', sa.Column('losses', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    op.drop_column('agents', 'losses')
