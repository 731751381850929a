"""The schema: users, agents, their steps and the webhooks owed, with the lifecycle's rules
as constraints.

The database, not only Python, refuses a row that breaks the lifecycle: a final
answer on an agent that is not COMPLETED, a terminal agent without `completed_at`,
a step type outside the fixed set, or the same iteration's THINK written twice.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jarvis_agents.lifecycle import AgentMode, AgentStatus, StepType, StopReason

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _in(column: str, values: list[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


STATUSES = [s.value for s in AgentStatus]
STOP_REASONS = [r.value for r in StopReason]
STEP_TYPES = [t.value for t in StepType]
MODES = [m.value for m in AgentMode]
TERMINAL_SQL = "status IN ('COMPLETED', 'FAILED', 'CANCELLED')"


def as_utc(value: datetime | None) -> datetime | None:
    """A datetime read back, timezone-aware: SQLite hands back naive ones; all stored is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # SHA-256 of the key: keys are 256-bit random tokens, so a fast hash is enough
    # and lets the API find a user with one indexed lookup.
    api_key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Set by `users revoke`: the key finds nobody. `users rotate` clears it.
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("length(trim(name)) > 0", name="name_not_blank"),
        CheckConstraint("length(api_key_hash) = 64", name="api_key_hash_is_sha256"),
    )


class AgentRow(Base):
    __tablename__ = "agents"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    goal: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(200))
    max_steps: Mapped[int] = mapped_column(Integer)
    step_count: Mapped[int] = mapped_column(Integer, default=0)
    final_answer: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    stop_reason: Mapped[str | None] = mapped_column(String(16))
    tools: Mapped[list[str] | None] = mapped_column(JSON)
    webhook_url: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Execution bookkeeping: which attempt owns the agent, and whether it is alive.
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # The attempts whose worker was lost: what JARVIS_MAX_ATTEMPTS counts. `attempt`
    # also counts a take-over after a graceful hand-back (heartbeat_at NULL).
    losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    task_id: Mapped[str | None] = mapped_column(String(64))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    # Approvals (docs/api.md §7; lifecycle.Agent says what each holds).
    approve_tools: Mapped[list[str] | None] = mapped_column(JSON)
    waiting_for: Mapped[dict[str, object] | None] = mapped_column(JSON)
    approval: Mapped[dict[str, object] | None] = mapped_column(JSON)
    waited_ms: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The mode asked for, then (once started) the one in use (docs/api.md §6).
    mode: Mapped[str] = mapped_column(String(8), default="auto", server_default="auto")
    # Usage as the executor last wrote it, with the agent's end (models.USAGE_AS_READ).
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    model_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    output_schema: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    output: Mapped[Any] = mapped_column(JSON(none_as_null=True))
    # Conversations and forks (docs/api.md §8; store/threads.py). A thread's id is its first
    # agent's id; `context` is what the thread's earlier agents give this one's model.
    thread_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    parent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    forked_from_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    forked_from_seq: Mapped[int | None] = mapped_column(Integer)
    context: Mapped[dict[str, object] | None] = mapped_column(JSON)
    # The W3C trace context of the agent's trace (migration 0007): 55 characters.
    traceparent: Mapped[str | None] = mapped_column(String(55))
    # Assistants, agents that call agents, schedules (migration 0012; lifecycle.Agent
    # says what each holds). A caller's call makes at most one child: the unique index
    # on (caller_id, caller_call_id) below.
    assistant_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    assistant_version: Mapped[int | None] = mapped_column(Integer)
    instructions: Mapped[str | None] = mapped_column(Text)
    delegates: Mapped[list[str] | None] = mapped_column(JSON)
    caller_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    caller_call_id: Mapped[str | None] = mapped_column(String(100))
    root_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    depth: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    descendants_input_tokens: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0")
    descendants_output_tokens: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default="0")
    descendants_model_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    schedule_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    scheduled_for: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(_in("status", STATUSES), name="status_known"),
        CheckConstraint(
            f"stop_reason IS NULL OR {_in('stop_reason', STOP_REASONS)}", name="stop_reason_known"
        ),
        CheckConstraint("length(trim(goal)) > 0 AND length(goal) <= 4000", name="goal_not_blank"),
        CheckConstraint("max_steps BETWEEN 1 AND 50", name="max_steps_range"),
        CheckConstraint("step_count >= 0 AND step_count <= max_steps", name="step_count_range"),
        CheckConstraint("attempt >= 0", name="attempt_not_negative"),
        CheckConstraint(_in("mode", MODES), name="mode_known"),
        CheckConstraint(
            "(status = 'COMPLETED' AND final_answer IS NOT NULL)"
            " OR (status <> 'COMPLETED' AND final_answer IS NULL)",
            name="final_answer_iff_completed",
        ),
        CheckConstraint(
            "(status = 'FAILED' AND error IS NOT NULL) OR (status <> 'FAILED' AND error IS NULL)",
            name="error_iff_failed",
        ),
        CheckConstraint(
            f"({TERMINAL_SQL} AND completed_at IS NOT NULL)"
            f" OR (NOT {TERMINAL_SQL} AND completed_at IS NULL)",
            name="completed_at_iff_terminal",
        ),
        CheckConstraint(
            f"({TERMINAL_SQL} AND stop_reason IS NOT NULL)"
            f" OR (NOT {TERMINAL_SQL} AND stop_reason IS NULL)",
            name="stop_reason_iff_terminal",
        ),
        CheckConstraint(
            "status NOT IN ('RUNNING', 'COMPLETED', 'FAILED') OR started_at IS NOT NULL",
            name="started_when_run",
        ),
        UniqueConstraint("user_id", "idempotency_key", name="uq_agents_user_idempotency_key"),
        Index("ix_agents_user_created", "user_id", "created_at", "id"),
        Index("ix_agents_status_heartbeat", "status", "heartbeat_at"),
        Index("ix_agents_user_status", "user_id", "status"),
        Index("ix_agents_thread", "thread_id", "created_at"),
        # Retention (migration 0020): the ended agents oldest end first, and an agent's forks.
        Index("ix_agents_ended", "completed_at", "id",
              postgresql_where=text("completed_at IS NOT NULL"),
              sqlite_where=text("completed_at IS NOT NULL")),
        Index("ix_agents_forked_from", "forked_from_id",
              postgresql_where=text("forked_from_id IS NOT NULL"),
              sqlite_where=text("forked_from_id IS NOT NULL")),
        # One agent of a thread at a time: two racing creates leave one winner.
        Index("uq_agents_one_active_per_thread", "thread_id", unique=True,
              postgresql_where=text(f"NOT {TERMINAL_SQL}"), sqlite_where=text(f"NOT {TERMINAL_SQL}")),
        # A call's child is made once, however often a crashed caller's call is resumed.
        Index("uq_agents_caller_call", "caller_id", "caller_call_id", unique=True,
              postgresql_where=text("caller_id IS NOT NULL"),
              sqlite_where=text("caller_id IS NOT NULL")),
        # A schedule's due time makes at most one agent, however many schedulers race.
        Index("uq_agents_schedule_due", "schedule_id", "scheduled_for", unique=True,
              postgresql_where=text("schedule_id IS NOT NULL"),
              sqlite_where=text("schedule_id IS NOT NULL")),
    )


class StepRow(Base):
    __tablename__ = "agent_steps"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(16))
    tool: Mapped[str | None] = mapped_column(String(100))
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    call_id: Mapped[str | None] = mapped_column(String(100))
    # The model call's tokens, on the first row of the iteration it produced.
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        UniqueConstraint("agent_id", "seq", name="uq_agent_steps_agent_seq"),
        # One THINK, one FINAL, … per iteration, and one ACT and one OBSERVE per tool
        # call: a resumed attempt cannot write an iteration's row twice even if its
        # bookkeeping were wrong.
        Index("uq_agent_steps_agent_step_type_call", "agent_id", "step", "type",
              text("coalesce(call_id, '')"), unique=True),
        CheckConstraint("seq >= 1", name="seq_positive"),
        CheckConstraint("step >= 0", name="step_not_negative"),
        CheckConstraint(_in("type", STEP_TYPES), name="type_known"),
        CheckConstraint("duration_ms IS NULL OR duration_ms >= 0", name="duration_not_negative"),
        CheckConstraint(
            "(type IN ('ACT', 'OBSERVE') AND tool IS NOT NULL) OR type NOT IN ('ACT', 'OBSERVE')",
            name="tool_on_act_observe",
        ),
    )


class AssistantRow(Base):
    """A user's assistant (jarvis_agents/assistants.py): its name and current version."""

    __tablename__ = "assistants"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        # Also how an agent create finds an assistant by name: one probe of this index.
        UniqueConstraint("user_id", "name", name="uq_assistants_user_name"),
        CheckConstraint("version >= 1", name="version_positive"),
    )


class AssistantVersionRow(Base):
    """One version of an assistant: its configuration as it was made, never changed."""

    __tablename__ = "assistant_versions"

    assistant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("assistants.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# The events a webhook is sent for (docs/api.md §9). `agent.waiting` joins them with approvals.
WEBHOOK_EVENTS = ["agent.completed", "agent.failed", "agent.cancelled", "agent.waiting"]
OWED_SQL = "delivered_at IS NULL AND abandoned_at IS NULL"


class WebhookDeliveryRow(Base):
    """A webhook owed: written in the transaction of the status change that owes it
    (store/outbox.py), sent and retried by the dispatcher (jarvis_agents/webhooks/)."""

    __tablename__ = "webhook_deliveries"

    # The Standard Webhooks `webhook-id`: the same on every try of this delivery.
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    agent_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    # The agent's user, whose deliveries share the senders fairly with others' (migration
    # 0012; NULL only on a row owed by a release before it).
    user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    event: Mapped[str] = mapped_column(String(32))
    url: Mapped[str] = mapped_column(Text)
    # The body every try sends: the agent JSON as it was when the event happened, made
    # with the change (NULL only on a row owed by an earlier release: its first try
    # makes it, and keeps it).
    payload: Mapped[str | None] = mapped_column(Text)
    # Tries begun so far; the next is due at `next_at`, which a claim moves a lease
    # ahead, so that a try whose worker died is due again once the lease runs out.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    # When the last failed try began, and how long it took.
    last_try_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_try_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Headers of its own its tries send besides the signed ones (JSON text): an A2A push
    # notification's X-A2A-Notification-Token (README, A2A); NULL for an agent's webhook.
    headers: Mapped[str | None] = mapped_column(Text)
    # Set when the delivery is dead: its last try failed (or its lease ran out), and it
    # is never tried again.
    abandoned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(_in("event", WEBHOOK_EVENTS), name="event_known"),
        CheckConstraint("attempts >= 0", name="attempts_not_negative"),
        CheckConstraint(
            "delivered_at IS NULL OR abandoned_at IS NULL", name="delivered_or_abandoned"
        ),
        # Only what is still owed is indexed: the dispatchers' claim reads this index
        # alone, however many deliveries have been made.
        Index("ix_webhook_deliveries_owed", "next_at",
              postgresql_where=text(OWED_SQL), sqlite_where=text(OWED_SQL)),
    )


# An agent's step_count as every read gives it. The row's column holds it once the
# executor has ended the agent (COMPLETED, or FAILED with its ERROR row, both written
# with the count). Until then — and for an agent ended by a cancel or by losing its
# worker, which write no rows — it is the iteration of the agent's last step plus one,
# read from the steps: on PostgreSQL a step write only locks the agent's row, it does
# not update it (see store/postgres.py). The steps' (agent_id, seq) index finds the
# last one in a probe. Plain SQL, the same on SQLite and PostgreSQL.
STEP_COUNT_AS_READ = (
    "CASE WHEN agents.status IN ('COMPLETED', 'FAILED') AND agents.stop_reason <> 'worker_lost'"
    " THEN agents.step_count"
    " ELSE coalesce((SELECT latest.step + 1 FROM agent_steps AS latest"
    " WHERE latest.agent_id = agents.id ORDER BY latest.seq DESC LIMIT 1), 0) END"
)

# An agent's usage as every read gives it: the row's columns once the executor has
# ended it (as step_count above), else summed from the steps' rows, which carry each
# model call's tokens on the first row of its iteration.
_USAGE_SUMS = {
    "input_tokens": "sum(used.input_tokens)", "output_tokens": "sum(used.output_tokens)",
    "model_calls": "count(used.input_tokens)",
}
USAGE_AS_READ = {
    column: (
        "CASE WHEN agents.status IN ('COMPLETED', 'FAILED') AND agents.stop_reason <> 'worker_lost'"
        f" THEN agents.{column}"
        f" ELSE coalesce((SELECT {total} FROM agent_steps AS used"
        " WHERE used.agent_id = agents.id), 0) END"
    )
    for column, total in _USAGE_SUMS.items()
}

# Every agent column a read computes rather than takes from the row.
AS_READ = {"step_count": STEP_COUNT_AS_READ, **USAGE_AS_READ}


class A2APushConfigRow(Base):
    """Where an A2A task's status changes are pushed (README, A2A): each change that owes
    a webhook owes a delivery to each config of its agent, in the same transaction."""

    __tablename__ = "a2a_push_configs"

    agent_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    token: Mapped[str | None] = mapped_column(Text)
    auth_scheme: Mapped[str | None] = mapped_column(String(64))
    auth_credentials: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
