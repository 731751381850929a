"""The webhook outbox in SQL: a delivery owed with the status change, its body made
then, claimed when due, and each try's outcome recorded — every change a compare-and-set.

A delivery is owed in the transaction of the status change itself (Repository.transition):
once the change won, the agent is read back in that transaction and, if it has a
`webhook_url`, the delivery is inserted with its body — the agent JSON as it is at that
moment, made by Agent.to_json as the API's answers are. Nothing can then commit the one
without the other, so no crash loses a webhook (README, Webhooks), and however late a try
is made (an `agent.waiting` sent after the approval came), it says what happened then.

Dispatchers in every worker claim due rows by moving `next_at` a lease ahead and counting
the try; a claimed row whose worker died is due again when the lease runs out. A claim
takes the users' due rows in turns (each user's oldest first, then each one's second, …)
and leaves out the users the claimer says are busy, so one user's many deliveries cannot
fill a claim while another's wait. A row whose last try was claimed and whose lease ran
out is dead: the claim that finds it marks it so (`abandoned_at`) instead of trying it
again. On PostgreSQL the claim skips rows another dispatcher is claiming (`FOR UPDATE
SKIP LOCKED`); SQLite runs one writer at a time, so its claim needs no lock. The retry
schedule lives in jarvis_agents/webhooks/dispatcher.py; this module only stores it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    DateTime,
    Engine,
    Integer,
    String,
    Text,
    Uuid,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection

from jarvis_agents.lifecycle import Agent, AgentStatus
from jarvis_agents.store.a2a_push import CONFIGS_OF, owed_pushes
from jarvis_agents.store.compiled import Prebuilt
from jarvis_agents.store.models import AgentRow, WebhookDeliveryRow
from jarvis_agents.store.rows import AGENT_READ, agent_from_row

agents = AgentRow.__table__
deliveries = WebhookDeliveryRow.__table__

# The event each status owes (docs/api.md §9).
EVENTS: dict[AgentStatus, str] = {
    AgentStatus.COMPLETED: "agent.completed",
    AgentStatus.FAILED: "agent.failed",
    AgentStatus.CANCELLED: "agent.cancelled",
    AgentStatus.WAITING: "agent.waiting",
}

# A claim of n rows chooses among the oldest CLAIM_WINDOW × n due ones.
CLAIM_WINDOW = 4

# What a dead delivery's last_error says when its last try never reported back.
LEASE_RAN_OUT = "its last try did not report back within its lease (its worker was lost)"


def webhook_body(agent: Agent) -> str:
    """The body of a webhook about `agent`: its agent JSON (Agent.to_json, the API's
    builder), compact and ASCII, so that its text and its bytes sign alike."""
    return json.dumps(agent.to_json(), separators=(",", ":"))


# The agent as every read gives it, and the delivery it owes: read and written in the
# transaction of the change, through SQLAlchemy (OutboxStore.owe) or on a DBAPI cursor
# (store/postgres.py).
AGENT_AS_READ = Prebuilt(select(*AGENT_READ).where(agents.c.id == bindparam("agent_id")))
OWE = Prebuilt(insert(deliveries).values(
    id=bindparam("id", type_=Uuid()), agent_id=bindparam("agent_id", type_=Uuid()),
    user_id=bindparam("user_id", type_=Uuid()), event=bindparam("event", type_=String()),
    url=bindparam("url", type_=Text()), payload=bindparam("payload", type_=Text()),
    headers=bindparam("headers", type_=Text()), attempts=0,
    next_at=bindparam("now", type_=DateTime(timezone=True)),
    created_at=bindparam("now", type_=DateTime(timezone=True)),
))


def owed(agent: Agent, event: str, *, now: datetime) -> dict[str, Any] | None:
    """OWE's values for the delivery of `event` about `agent` as it is now, due now;
    None for an agent without a webhook_url."""
    if agent.webhook_url is None:
        return None
    return {"id": uuid.uuid4(), "agent_id": agent.id, "user_id": agent.user_id, "event": event,
            "url": agent.webhook_url, "payload": webhook_body(agent), "headers": None,
            "now": now}


def owed_all(agent: Agent, event: str, push_configs: list[dict[str, Any]], *,
             now: datetime) -> list[dict[str, Any]]:
    """OWE's values of every delivery `event` owes: the agent's webhook, if it has a
    webhook_url, and a push to each of its A2A push configs (store/a2a_push.py)."""
    webhook = owed(agent, event, now=now)
    return ([webhook] if webhook else []) + owed_pushes(agent, event, push_configs, now=now)


@dataclass(frozen=True)
class Delivery:
    """One try of a delivery, as its claim returned it."""

    id: uuid.UUID  # the webhook-id
    agent_id: uuid.UUID
    user_id: uuid.UUID | None  # None only on a row owed before migration 0012
    event: str
    url: str
    payload: str | None  # the body; None only on a row owed by an earlier release
    attempt: int  # this try's number, from 1 (for a dead one: its last try's)
    dead: bool = False  # its last try's lease ran out: the claim marked it dead, not to try
    headers: str | None = None  # its own headers, as JSON text (an A2A push's token)


_OWED = (deliveries.c.delivered_at.is_(None), deliveries.c.abandoned_at.is_(None))


_AT = DateTime(timezone=True)
_NOW = bindparam("now", type_=_AT)
_TRIES = bindparam("tries", type_=Integer)

# The statements, built once: SQLAlchemy then keys its compiled-statement cache on the
# same objects every time instead of building and hashing a new tree per call (a large
# part of a claim's CPU in the worker).
#
# The users' turns: the oldest due rows (a window a few claims wide, so that a claim
# costs the same however many are due), each numbered within its user's, oldest first.
# The busy users' rows are left out before the window is taken. The rows are read,
# not locked: the locks are taken below, on the rows the claim picks.
_OLDEST = (
    select(deliveries.c.id, deliveries.c.user_id, deliveries.c.next_at)
    .where(*_OWED, deliveries.c.next_at <= _NOW,
           or_(deliveries.c.user_id.is_(None),
               deliveries.c.user_id.not_in(bindparam("busy_users", expanding=True))))
    .order_by(deliveries.c.next_at)
    .limit(bindparam("window", type_=Integer))
    .subquery("oldest")
)
_TURNS = (
    select(_OLDEST.c.id, _OLDEST.c.next_at, func.row_number().over(
        partition_by=_OLDEST.c.user_id,
        order_by=(_OLDEST.c.next_at, _OLDEST.c.id)).label("turn"))
    .cte("turns")
    .prefix_with("MATERIALIZED", dialect="postgresql")
)
# The claim's CTEs are materialized, so that each runs once: as `id IN (SELECT … LIMIT
# n)` PostgreSQL's planner may run the subquery again per row and claim more than n.
# The picked rows are found by their key, and locked, with no condition of their own: a
# row another claim took meanwhile is left out by the UPDATE's, which are checked again
# on the row as it is then (and an index on next_at is not walked once per picked row).
_DUE = (
    select(deliveries.c.id)
    .select_from(_TURNS.join(deliveries, deliveries.c.id == _TURNS.c.id))
    .order_by(_TURNS.c.turn, _TURNS.c.next_at)
    .limit(bindparam("limit", type_=Integer))
    .with_for_update(skip_locked=True, of=deliveries)  # PostgreSQL; SQLite's compiler leaves it out
    .cte("due")
    .prefix_with("MATERIALIZED", dialect="postgresql")
)
_LEFT = deliveries.c.attempts < _TRIES  # a try of the schedule is left
_CLAIM = (
    update(deliveries)
    .where(deliveries.c.id.in_(select(_DUE.c.id)), *_OWED, deliveries.c.next_at <= _NOW)
    .values(
        attempts=case((_LEFT, deliveries.c.attempts + 1), else_=deliveries.c.attempts),
        next_at=case((_LEFT, bindparam("leased_until", type_=_AT)), else_=deliveries.c.next_at),
        abandoned_at=case((_LEFT, None), else_=_NOW),
        last_error=case((_LEFT, deliveries.c.last_error), else_=LEASE_RAN_OUT),
    )
    .returning(deliveries.c.id, deliveries.c.agent_id, deliveries.c.user_id,
               deliveries.c.event, deliveries.c.url, deliveries.c.payload,
               deliveries.c.attempts, deliveries.c.abandoned_at, deliveries.c.headers)
)
_DELIVERED = (
    update(deliveries)
    .where(deliveries.c.id.in_(bindparam("ids", expanding=True)), *_OWED)
    .values(delivered_at=_NOW)
)
_RELEASE = (
    update(deliveries)
    .where(deliveries.c.id == bindparam("delivery_id"),
           deliveries.c.attempts == bindparam("claimed_attempt"),
           *_OWED)
    .values(attempts=deliveries.c.attempts - 1, next_at=_NOW)
)


class OutboxStore:
    """Claims and outcomes of webhook deliveries, over the repository's engine."""

    def __init__(
        self, engine: Engine, one_statement: Callable[[], AbstractContextManager[Connection]]
    ) -> None:
        self.engine = engine
        self._one_statement = one_statement  # autocommit on PostgreSQL (store/connections.py)

    def owe(self, conn: Connection, agent_id: uuid.UUID, event: str, *, now: datetime) -> bool:
        """In the transaction of the change that owes it (`conn`, after the change and its
        steps): the deliveries of `event`, due now, with the agent as it is now for their
        bodies (owed_all); nothing for an agent without a webhook_url or push configs.
        Whether one was owed."""
        row = conn.execute(AGENT_AS_READ.statement, {"agent_id": agent_id}).mappings().first()
        if row is None:
            return False
        pushes = conn.execute(CONFIGS_OF.statement, {"agent_id": agent_id}).mappings().all()
        values = owed_all(agent_from_row(row), event, [dict(p) for p in pushes], now=now)
        for delivery in values:
            conn.execute(OWE.statement, delivery)
        return bool(values)

    def claim_due(
        self, *, now: datetime, lease_s: float, limit: int, tries: int,
        busy_users: Collection[uuid.UUID] = (),
    ) -> list[Delivery]:
        """Take up to `limit` deliveries due at `now` for one try each, leased for `lease_s`,
        the users in turns and none of `busy_users`'. A row whose `tries` are all begun
        (its last try's lease ran out) is marked dead instead, and returned with `dead`."""
        with self._one_statement() as conn:
            rows = conn.execute(_CLAIM, {
                "now": now, "leased_until": now + timedelta(seconds=lease_s), "limit": limit,
                "window": CLAIM_WINDOW * limit, "tries": tries, "busy_users": list(busy_users),
            }).all()
        return [Delivery(*row[:7], dead=row[7] is not None, headers=row[8]) for row in rows]

    def delivered(self, ids: Sequence[uuid.UUID], *, now: datetime) -> int:
        """Record that these deliveries' tries were answered 2xx (any try: a late one
        counts too); how many were still owed."""
        if not ids:
            return 0
        with self._one_statement() as conn:
            return conn.execute(_DELIVERED, {"ids": list(ids), "now": now}).rowcount

    def release(self, delivery: Delivery, *, now: datetime) -> bool:
        """Hand a claimed try back untried, due at once and not counted (a dispatcher
        that could not start it well within its lease)."""
        with self._one_statement() as conn:
            return conn.execute(_RELEASE, {"delivery_id": delivery.id,
                                           "claimed_attempt": delivery.attempt,
                                           "now": now}).rowcount == 1

    def failed(
        self, delivery: Delivery, *, payload: str, error: str, began: datetime, took_ms: int,
        now: datetime, retry_at: datetime | None,
    ) -> bool:
        """Record a failed try (when it began, how long it took, why): due again at
        `retry_at`, or dead when it is None. Only the latest claim may: a try that
        outlived its lease changes nothing. `payload` is kept only where the row had
        none (owed by an earlier release): every retry sends the first try's bytes."""
        schedule = {"next_at": retry_at} if retry_at is not None else {"abandoned_at": now}
        with self._one_statement() as conn:
            return conn.execute(
                update(deliveries)
                .where(deliveries.c.id == delivery.id,
                       deliveries.c.attempts == delivery.attempt, *_OWED)
                .values(payload=func.coalesce(deliveries.c.payload, payload), last_error=error,
                        last_try_at=began, last_try_ms=took_ms, **schedule)
            ).rowcount == 1

    def of_agent(self, agent_id: uuid.UUID) -> list[dict[str, object]]:
        """The agent's deliveries, oldest first: what was owed and what became of it."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(deliveries).where(deliveries.c.agent_id == agent_id)
                .order_by(deliveries.c.created_at)
            ).mappings().all()
        return [dict(row) for row in rows]
