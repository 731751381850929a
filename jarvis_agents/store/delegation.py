"""Agents that call agents in SQL (README, Agents that call agents): `repository.delegation`.

A caller's calls start their children in one transaction with the caller's move from
RUNNING to WAITING: the compare-and-set on the caller's attempt comes first and holds
its row, so no other run of the caller can insert a child of the same call meanwhile;
the unique index on (caller_id, caller_call_id) refuses one anyway. A crash before the
commit leaves neither the children nor the wait; after it, both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, String, and_, cast, exists, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from jarvis_agents.lifecycle import TERMINAL, Agent, AgentStatus, Step, Usage
from jarvis_agents.store.models import AgentRow, StepRow
from jarvis_agents.store.outbox import EVENTS, OutboxStore
from jarvis_agents.store.recovery import running_under
from jarvis_agents.store.rows import AGENT_READ, agent_from_row, agent_values, step_values

agents = AgentRow.__table__
steps_table = StepRow.__table__
_ENDED = [status.value for status in TERMINAL]


class DelegationRows:
    """Children, their callers, and the waits between them."""

    def __init__(self, engine: Engine, outbox: OutboxStore,
                 read: Callable[[Any], Sequence[Any]],
                 one_statement: Callable[[], AbstractContextManager[Connection]]) -> None:
        self._engine = engine
        self._outbox = outbox
        self._read = read
        self._one_statement = one_statement

    def children(self, caller_id: uuid.UUID) -> list[Agent]:
        """Every child the caller has started, oldest first."""
        rows = self._read(select(*AGENT_READ).where(agents.c.caller_id == caller_id)
                          .order_by(agents.c.created_at, agents.c.id))
        return [agent_from_row(row) for row in rows]

    def start(self, caller: Agent, *, children: Sequence[Agent], waiting_for: dict[str, Any],
              steps: Sequence[Step], now: datetime) -> bool:
        """RUNNING → WAITING under the caller's attempt, inserting `children` (PENDING) and
        `steps` with it; False, changing nothing, when the attempt no longer owns the
        caller or a child of one of its calls exists already."""
        try:
            with self._engine.begin() as conn:
                won = conn.execute(
                    update(agents).where(*running_under(caller.id, caller.attempt))
                    .values(status=AgentStatus.WAITING.value, waiting_for=waiting_for,
                            heartbeat_at=None, updated_at=now)
                ).rowcount == 1
                if not won:
                    return False
                if children:
                    conn.execute(insert(agents), [agent_values(child) for child in children])
                if steps:
                    conn.execute(insert(steps_table),
                                 step_values(caller.id, caller.attempt, steps))
                self._outbox.owe(conn, caller.id, EVENTS[AgentStatus.WAITING], now=now)
        except IntegrityError:
            return False  # a child of the call made by another run: the next one finds it
        return True

    def ended_waits(self, *, limit: int = 100) -> list[Agent]:
        """WAITING callers that have children, none of which is still going: a caller
        whose last child's end was not followed by its wake (a worker died between)."""
        child = agents.alias("child")
        rows = self._read(
            select(*AGENT_READ).where(
                agents.c.status == AgentStatus.WAITING.value,
                # Not one waiting for a person after earlier calls (as the JSON is written).
                cast(agents.c.waiting_for, String).like('%"kind": "agents"%'),
                exists().where(child.c.caller_id == agents.c.id),
                ~exists().where(and_(child.c.caller_id == agents.c.id,
                                     child.c.status.not_in(_ENDED))),
            ).limit(limit))
        return [agent_from_row(row) for row in rows]

    def remote_due(self, *, polled_before: datetime, now: datetime, limit: int = 100) -> list[Agent]:
        """Claim the open calls of remote delegates not asked after since `polled_before`,
        least recently asked first: each is asked by one sweep per period, however many
        workers sweep, and none waits behind the first `limit`. A WAITING row's
        `heartbeat_at` (unused while it waits) holds when it was last asked."""
        return self._claim(and_(agents.c.status == AgentStatus.WAITING.value,
                                cast(agents.c.waiting_for, String).like('%"kind": "remote"%')),
                           polled_before=polled_before, now=now, limit=limit)

    def cancels_due(self, *, cancelled_after: datetime, polled_before: datetime, now: datetime,
                    limit: int = 100) -> list[Agent]:
        """Claim, as `remote_due` does, the calls of remote delegates cancelled since
        `cancelled_after` whose CancelTask is owed (`owe_cancel`). Only those ended
        lately are looked at (ix_agents_ended), not every cancelled agent there is."""
        return self._claim(and_(agents.c.completed_at >= cancelled_after,
                                agents.c.status == AgentStatus.CANCELLED.value,
                                cast(agents.c.waiting_for, String).like('%"cancel_owed": true%')),
                           polled_before=polled_before, now=now, limit=limit)

    def owe_cancel(self, agent_id: uuid.UUID, waiting_for: dict[str, Any]) -> bool:
        """Write a CANCELLED call's `waiting_for`: with `cancel_owed`, its remote task's
        CancelTask is owed; without, settled. False if the agent is not CANCELLED."""
        with self._one_statement() as conn:
            return conn.execute(
                update(agents).where(agents.c.id == agent_id,
                                     agents.c.status == AgentStatus.CANCELLED.value)
                .values(waiting_for=waiting_for)).rowcount == 1

    def _claim(self, where: Any, *, polled_before: datetime, now: datetime,
               limit: int) -> list[Agent]:
        due = and_(where, or_(agents.c.heartbeat_at.is_(None), agents.c.heartbeat_at < polled_before))
        ids = [row["id"] for row in self._read(
            select(agents.c.id).where(due)
            .order_by(agents.c.heartbeat_at.is_not(None), agents.c.heartbeat_at).limit(limit))]
        if not ids:
            return []
        with self._engine.begin() as conn:
            conn.execute(update(agents).where(agents.c.id.in_(ids), due).values(heartbeat_at=now))
        rows = self._read(select(*AGENT_READ).where(agents.c.id.in_(ids), agents.c.heartbeat_at == now))
        return [agent_from_row(row) for row in rows]

    def roll_up(self, agent_id: uuid.UUID, descendants: Usage) -> bool:
        """Record the usage of a CANCELLED agent's descendants, its cascade done (a
        caller that ends by itself has it from its wake); False if it is not CANCELLED."""
        with self._one_statement() as conn:
            return conn.execute(
                update(agents).where(agents.c.id == agent_id,
                                     agents.c.status == AgentStatus.CANCELLED.value)
                .values(descendants_input_tokens=descendants.input_tokens,
                        descendants_output_tokens=descendants.output_tokens,
                        descendants_model_calls=descendants.model_calls)).rowcount == 1

    def orphans(self, *, limit: int = 100) -> list[Agent]:
        """Children still going whose caller was cancelled: a cascade a crash cut short."""
        caller = agents.alias("caller")
        rows = self._read(
            select(*AGENT_READ).where(
                agents.c.caller_id.is_not(None), agents.c.status.not_in(_ENDED),
                exists().where(and_(caller.c.id == agents.c.caller_id,
                                    caller.c.status == AgentStatus.CANCELLED.value)),
            ).limit(limit))
        return [agent_from_row(row) for row in rows]
