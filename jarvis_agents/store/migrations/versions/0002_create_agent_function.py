"""create_agent as one PostgreSQL function: lock, checks and insert in one round trip

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 02:40:00

On PostgreSQL only: SQLite keeps the repository's portable path.
"""

from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

# Returns 'created', 'repeat' (the user already has an agent under this idempotency
# key: nothing inserted) or 'limited' (`max_active` agents PENDING or RUNNING).
CREATE_AGENT = """
CREATE FUNCTION jarvis_create_agent(agent agents, max_active integer) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- Creates of one user queue up on the user's row, each until it commits.
    PERFORM FROM users WHERE id = agent.user_id FOR UPDATE;
    -- Under READ COMMITTED each statement of a VOLATILE function takes its snapshot as
    -- it starts: the ones below see every create that committed while this one waited.
    IF agent.idempotency_key IS NOT NULL AND EXISTS (
        SELECT FROM agents
        WHERE user_id = agent.user_id AND idempotency_key = agent.idempotency_key
    ) THEN
        RETURN 'repeat';
    END IF;
    -- Counting stops at max_active rows: the question is only "under the limit or not",
    -- and a user with a big backlog must not slow creates down.
    IF max_active IS NOT NULL AND (
        SELECT count(*) FROM (
            SELECT FROM agents
            WHERE user_id = agent.user_id AND status IN ('PENDING', 'RUNNING')
            LIMIT max_active
        ) AS active
    ) >= max_active THEN
        RETURN 'limited';
    END IF;
    INSERT INTO agents SELECT agent.*;
    RETURN 'created';
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CREATE_AGENT)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION jarvis_create_agent(agents, integer)")
