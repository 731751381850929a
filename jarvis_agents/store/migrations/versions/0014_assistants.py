"""assistants: saved, versioned agent configurations, per user

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 09:00:00

`assistants` holds each assistant's name and current version, unique by (user, name),
which is also the index an agent create finds an assistant by name with;
`assistant_versions` holds every version's configuration (JSON), never changed once
made. Both go with their user (ON DELETE CASCADE). The default assistant `agent` has no
row (jarvis_agents/assistants.py). Two new tables: nothing existing is touched.
"""

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('assistants',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('user_id', sa.Uuid(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('version >= 1', name=op.f('ck_assistants_version_positive')),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_assistants_user_id_users'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_assistants')),
    sa.UniqueConstraint('user_id', 'name', name='uq_assistants_user_name'),
    )
    op.create_table('assistant_versions',
    sa.Column('assistant_id', sa.Uuid(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['assistant_id'], ['assistants.id'],
                            name=op.f('fk_assistant_versions_assistant_id_assistants'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('assistant_id', 'version', name=op.f('pk_assistant_versions')),
    )


def downgrade() -> None:
    op.drop_table('assistant_versions')
    op.drop_table('assistants')
