"""agents.traceparent: the W3C trace context each agent's spans continue

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-02 12:00:00

One agent is one trace (docs/api.md §10): the create's trace context is kept with the
agent, so every attempt of every worker, a resume included, continues it, and the
agent JSON's `trace_id` is read from it whether or not traces are exported. Agents
created before have none; their `trace_id` is their id's hex.
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('agents', sa.Column('traceparent', sa.String(55), nullable=True))


def downgrade() -> None:
    op.drop_column('agents', 'traceparent')
