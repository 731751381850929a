"""agents of assistants, agents that call agents, agents of schedules

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-06 21:00:00

agents gains the assistant (and version) it was made from with the `instructions` and
`delegates` it took; the caller that made it and the call, the chain's first caller and
its depth; the usage of its ended descendants; and the schedule and due time that made it.
Plain ADD COLUMNs, each NULL or with a constant default: no table rewrite on PostgreSQL
(11 and later), so the migration holds the table's lock for a moment only. Two partial
unique indexes: a call's child, and a schedule's due time, are made at most once; both
are built over rows that have the column set, which no existing row has.
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0010'
branch_labels = None
depends_on = None

COLUMNS = (
    sa.Column('assistant_id', sa.Uuid(), nullable=True),
    sa.Column('assistant_version', sa.Integer(), nullable=True),
    sa.Column('instructions', sa.Text(), nullable=True),
    sa.Column('delegates', sa.JSON(), nullable=True),
    sa.Column('caller_id', sa.Uuid(), nullable=True),
    sa.Column('caller_call_id', sa.String(100), nullable=True),
    sa.Column('root_id', sa.Uuid(), nullable=True),
    sa.Column('depth', sa.Integer(), server_default='0', nullable=False),
    sa.Column('descendants_input_tokens', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('descendants_output_tokens', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('descendants_model_calls', sa.Integer(), server_default='0', nullable=False),
    sa.Column('schedule_id', sa.Uuid(), nullable=True),
    sa.Column('scheduled_for', sa.DateTime(timezone=True), nullable=True),
)


def upgrade() -> None:
    for column in COLUMNS:
        op.add_column('agents', column)
    op.create_index(
        'uq_agents_caller_call', 'agents', ['caller_id', 'caller_call_id'], unique=True,
        postgresql_where=sa.text('caller_id IS NOT NULL'),
        sqlite_where=sa.text('caller_id IS NOT NULL'),
    )
    op.create_index(
        'uq_agents_schedule_due', 'agents', ['schedule_id', 'scheduled_for'], unique=True,
        postgresql_where=sa.text('schedule_id IS NOT NULL'),
        sqlite_where=sa.text('schedule_id IS NOT NULL'),
    )


def downgrade() -> None:
    op.drop_index('uq_agents_schedule_due', table_name='agents')
    op.drop_index('uq_agents_caller_call', table_name='agents')
    # Plain DROP COLUMNs (SQLite ≥ 3.35), not batch mode: see 0005.
    for column in reversed(COLUMNS):
        op.drop_column('agents', column.name)
