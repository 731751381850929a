"""approvals: the WAITING status, what an agent waits on and the answer; steps' call_id

Revision ID: 0009
Revises: 0005
Create Date: 2026-12-02 11:30:00

agents gains `approve_tools` (the tools whose calls wait for a person), `waiting_for`
(the call waited on while WAITING), `approval` (the latest answer) and `waited_ms`
(time spent WAITING, which the total timeout leaves out); the status and stop_reason
checks learn WAITING and `approval_timeout`. agent_steps gains `call_id`, which pairs
an ACT with its OBSERVE (CONTRACT §2).
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0005'
branch_labels = None
depends_on = None

STATUSES = ('PENDING', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'CANCELLED')
STOP_REASONS = ('final_answer', 'max_steps', 'total_timeout', 'step_timeout', 'model_error',
                'worker_lost', 'cancelled', 'approval_timeout')


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _checks(batch, statuses: tuple[str, ...], stop_reasons: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    batch.drop_constraint(op.f('ck_agents_status_known'), type_='check')
    batch.drop_constraint(op.f('ck_agents_stop_reason_known'), type_='check')
    batch.create_check_constraint(op.f('ck_agents_status_known'), _in('status', statuses))
    batch.create_check_constraint(
        op.f('ck_agents_stop_reason_known'),
        f"stop_reason IS NULL OR {_in('stop_reason', stop_reasons)}")


def upgrade() -> None:
    with op.batch_alter_table('agents') as batch:
        batch.add_column(sa.Column('approve_tools', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('waiting_for', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('approval', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('waited_ms', sa.Integer(), server_default='0', nullable=False))
        _checks(batch, STATUSES, STOP_REASONS)
    op.add_column('agent_steps', sa.Column('call_id', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('agent_steps', 'call_id')
    with op.batch_alter_table('agents') as batch:
        _checks(batch, tuple(s for s in STATUSES if s != 'WAITING'), STOP_REASONS[:-1])
        batch.drop_column('waited_ms')
        batch.drop_column('approval')
        batch.drop_column('waiting_for')
        batch.drop_column('approve_tools')
