"""retention: the ended agents by when they ended, and an agent's forks

Revision ID: 0020
Revises: 0021
Create Date: 2026-12-06 23:59:00

Two partial indexes on agents, for the retention sweep (README, Deleting and
retention): the ended agents in the order they ended, and the forks of an agent. No
column changes and no row is rewritten. Each CREATE INDEX reads the agents table once
(not the steps); meanwhile writes to agents wait, and reads go on. On PostgreSQL a
build of both over a million agents takes seconds (BENCHMARKS.md has the figure).
"""

import sqlalchemy as sa
from alembic import op

revision = '0020'
down_revision = '0018'
branch_labels = None
depends_on = None

ENDED_SQL = "completed_at IS NOT NULL"
FORKED_SQL = "forked_from_id IS NOT NULL"


def upgrade() -> None:
    op.create_index('ix_agents_ended', 'agents', ['completed_at', 'id'],
                    postgresql_where=sa.text(ENDED_SQL), sqlite_where=sa.text(ENDED_SQL))
    op.create_index('ix_agents_forked_from', 'agents', ['forked_from_id'],
                    postgresql_where=sa.text(FORKED_SQL), sqlite_where=sa.text(FORKED_SQL))


def downgrade() -> None:
    op.drop_index('ix_agents_forked_from', table_name='agents')
    op.drop_index('ix_agents_ended', table_name='agents')
