"""schedules: agents made on a clock

Revision ID: 0018
Revises: 0021
Create Date: 2026-12-07 00:00:00

`schedules` holds each schedule's cron expression, time zone, agent template (JSON),
thread and overlap policies, and its next due time (UTC), which the firing loop reads
through a partial index of the enabled schedules and moves with a compare-and-set.
Schedules go with their user (ON DELETE CASCADE); the agents they made keep
`schedule_id` (migration 0012). A new table: nothing existing is touched.
"""

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('schedules',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=False),
    sa.Column('goal', sa.Text(), nullable=False),
    sa.Column('cron', sa.String(length=200), nullable=False),
    sa.Column('timezone', sa.String(length=64), nullable=False),
    sa.Column('template', sa.JSON(), nullable=False),
    sa.Column('thread', sa.String(length=8), nullable=False),
    sa.Column('thread_id', sa.Uuid(), nullable=True),
    sa.Column('overlap', sa.String(length=8), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('next_run_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_agent_id', sa.Uuid(), nullable=True),
    sa.Column('skipped', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("thread IN ('new', 'same')", name=op.f('ck_schedules_thread_known')),
    sa.CheckConstraint("overlap IN ('skip', 'allow')", name=op.f('ck_schedules_overlap_known')),
    sa.CheckConstraint('skipped >= 0', name=op.f('ck_schedules_skipped_not_negative')),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_schedules_user_id_users'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_schedules')),
    )
    op.create_index('ix_schedules_user_id', 'schedules', ['user_id'])
    op.create_index('ix_schedules_due', 'schedules', ['next_run_at'],
                    postgresql_where=sa.text('enabled'), sqlite_where=sa.text('enabled'))


def downgrade() -> None:
    op.drop_index('ix_schedules_due', table_name='schedules')
    op.drop_index('ix_schedules_user_id', table_name='schedules')
    op.drop_table('schedules')
