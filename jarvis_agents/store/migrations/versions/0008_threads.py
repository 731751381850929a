"""agents in threads, and forks: thread_id, parent_id, forked_from, the thread's context

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 11:40:00

A thread's id is its first agent's id (docs/api.md §8): every existing agent starts a
thread of its own. At most one agent of a thread is PENDING, RUNNING or WAITING at a
time, and the database says so: a partial unique index, so two racing creates in one
thread leave one winner.
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

# Any status but a terminal one: WAITING (approvals) included, whenever it exists.
ACTIVE_SQL = "status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')"


def upgrade() -> None:
    op.add_column('agents', sa.Column('thread_id', sa.Uuid(), nullable=True))
    op.add_column('agents', sa.Column('parent_id', sa.Uuid(), nullable=True))
    op.add_column('agents', sa.Column('forked_from_id', sa.Uuid(), nullable=True))
    op.add_column('agents', sa.Column('forked_from_seq', sa.Integer(), nullable=True))
    op.add_column('agents', sa.Column('context', sa.JSON(), nullable=True))
    op.execute("UPDATE agents SET thread_id = id")
    op.create_index('ix_agents_thread', 'agents', ['thread_id', 'created_at'])
    op.create_index(
        'uq_agents_one_active_per_thread', 'agents', ['thread_id'], unique=True,
        postgresql_where=sa.text(ACTIVE_SQL), sqlite_where=sa.text(ACTIVE_SQL),
    )


def downgrade() -> None:
    op.drop_index('uq_agents_one_active_per_thread', table_name='agents')
    op.drop_index('ix_agents_thread', table_name='agents')
    # Plain DROP COLUMNs (SQLite ≥ 3.35), not batch mode: see 0005.
    for column in ('context', 'forked_from_seq', 'forked_from_id', 'parent_id', 'thread_id'):
        op.drop_column('agents', column)
