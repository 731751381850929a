"""langgraph_threads, langgraph_runs: the LangGraph SDK's threads and runs

Revision ID: 0021
Revises: 0017
Create Date: 2026-12-07 00:00:00

Threads made before their first run, runs enqueued behind a thread's active one, and
runs that answer an interrupt (README, LangGraph SDK). New tables only.
"""

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'langgraph_threads',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('user_id', sa.Uuid(), nullable=False),
        sa.Column('metadata', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'],
                                name=op.f('fk_langgraph_threads_user_id_users'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_langgraph_threads')),
    )
    op.create_index('ix_langgraph_threads_user', 'langgraph_threads', ['user_id', 'created_at'])
    op.create_table(
        'langgraph_runs',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('user_id', sa.Uuid(), nullable=False),
        sa.Column('thread_id', sa.Uuid(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('agent_id', sa.Uuid(), nullable=True),
        sa.Column('goal', sa.Text(), nullable=True),
        sa.Column('assistant', sa.String(length=64), nullable=True),
        sa.Column('metadata', sa.JSON(), nullable=False),
        sa.Column('multitask_strategy', sa.String(length=16), nullable=False),
        sa.Column('after_seq', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'],
                                name=op.f('fk_langgraph_runs_user_id_users'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_langgraph_runs')),
    )
    op.create_index('ix_langgraph_runs_thread', 'langgraph_runs', ['thread_id', 'created_at'])
    op.create_index('ix_langgraph_runs_kind', 'langgraph_runs', ['kind', 'created_at'])


def downgrade() -> None:
    op.drop_table('langgraph_runs')
    op.drop_table('langgraph_threads')
