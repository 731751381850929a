"""Retention: ended agents older than JARVIS_RETENTION are deleted, a small batch at a time.

An agent that ended longer ago than the retention is deleted with all that belongs to it
(its steps, webhook deliveries and A2A push configs) unless an agent that is kept
depends on it (README, Deleting and retention). A kept agent keeps its caller, its
children, the agent it was forked from and the earlier turns of its thread; an agent
kept that way keeps what it depends on in turn. The sweep finds, from the oldest
expired agents, every agent that could keep one of them (its children, its caller, its
forks, the later turns of its thread, and theirs), keeps whatever one that has not
expired depends on, and deletes the rest in batches. Each batch is one short
transaction that locks only the rows of agents that have ended, which no hot statement
writes; its delete checks again, in SQL, that each agent has ended long enough ago and
that no agent that has not depends on it directly, so an agent created meanwhile (a
follow-up, a fork, a child) keeps what it needs.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from jarvis_agents.lifecycle import utcnow

log = logging.getLogger(__name__)

# Agents deleted per transaction: a few hundred steps' rows each at the most.
BATCH = 50
# Expired agents looked at per page, and the most agents one page's look at what
# depends on them may gather (past it, those not yet looked at are kept this round).
PAGE = 200
MAX_LINKED = 5000
# The shortest time within which an expired agent is deleted (README): the sweep runs
# every heartbeat interval, well inside it.
MIN_DEADLINE_S = 120.0
# How long one sweep may go on deleting before it lets the worker's other sweeps run: a
# tenth of the default heartbeat interval, as the worker's agents share its process and
# the database and come first; it still deletes far faster than agents end (BENCHMARKS.md).
SWEEP_BUDGET_S = 0.5


@dataclass(frozen=True)
class Links:
    """What the sweep needs to know of an agent: when it ended and what it is linked to."""

    id: uuid.UUID
    created_at: datetime
    completed_at: datetime | None  # None while it has not ended
    thread_id: uuid.UUID | None
    caller_id: uuid.UUID | None
    forked_from_id: uuid.UUID | None

    @property
    def thread(self) -> uuid.UUID:
        return self.thread_id or self.id


@dataclass(frozen=True)
class Deleted:
    """How many rows a deletion removed, by kind (the metric's `kind` label)."""

    agents: int = 0
    steps: int = 0
    webhook_deliveries: int = 0

    def __add__(self, other: Deleted) -> Deleted:
        return Deleted(self.agents + other.agents, self.steps + other.steps,
                       self.webhook_deliveries + other.webhook_deliveries)

    def by_kind(self) -> dict[str, int]:
        return {"agent": self.agents, "step": self.steps,
                "webhook_delivery": self.webhook_deliveries}


class DeletionStore(Protocol):
    """The store's deletions (store/deletion.py and its in-memory twin)."""

    def delete_ended(
        self, agent_ids: Collection[uuid.UUID], *, user_id: uuid.UUID | None = None,
        ended_before: datetime | None = None,
    ) -> Deleted:
        """Delete these agents, those of them that have ended (before `ended_before`, and
        no agent that has not ended by then depends on them directly; `user_id`'s), with
        their steps, deliveries and push configs: one transaction."""
        ...

    def ended_before(
        self, cutoff: datetime, *, after: tuple[datetime, uuid.UUID] | None, limit: int,
    ) -> list[Links]:
        """Agents that ended before `cutoff`, oldest end first, after `after` (end, id)."""
        ...

    def linked(self, ids: Collection[uuid.UUID], threads: Collection[uuid.UUID],
               callers: Collection[uuid.UUID]) -> list[Links]:
        """The agents called by or forked from one of `ids`, of one of `threads`, or
        whose id is in `callers`."""
        ...

    def agents_of_user(self, user_id: uuid.UUID, *, ended: bool, limit: int) -> list[uuid.UUID]:
        """Up to `limit` of the user's agents that have ended (or, not `ended`, not)."""
        ...


@dataclass
class SweepReport:
    deleted: Deleted = field(default_factory=Deleted)
    kept: int = 0  # expired agents kept because an agent that is kept depends on them


def deadline_s(retention_s: float) -> float:
    """Within how long of its end an agent is deleted: twice the retention, or 2 minutes."""
    return max(2 * retention_s, MIN_DEADLINE_S)


class Retention:
    """One worker's retention sweep (the runner's sweep loop runs it every heartbeat
    interval); `record` counts what each batch deleted."""

    def __init__(
        self, store: DeletionStore, *, retention_s: float,
        record: Callable[[Deleted], None] = lambda _: None,
        clock: Callable[[], datetime] = utcnow, budget_s: float = SWEEP_BUDGET_S,
    ) -> None:
        self.store = store
        self.retention = timedelta(seconds=retention_s)
        self.record = record
        self.clock = clock
        self.budget_s = budget_s

    def sweep(self) -> SweepReport:
        """Delete what has expired, page by page from the oldest, within the budget."""
        report = SweepReport()
        cutoff = self.clock() - self.retention
        until = time.monotonic() + self.budget_s
        after: tuple[datetime, uuid.UUID] | None = None
        while time.monotonic() < until:
            page = self.store.ended_before(cutoff, after=after, limit=PAGE)
            if not page:
                break
            last = page[-1]
            after = (last.completed_at or cutoff, last.id)
            doomed = deletable(self.store, page, cutoff)
            report.kept += len(page) - len({a.id for a in page} & set(doomed))
            for start in range(0, len(doomed), BATCH):
                deleted = self.store.delete_ended(doomed[start:start + BATCH], ended_before=cutoff)
                report.deleted += deleted
                self.record(deleted)
            if len(page) < PAGE:
                break
        if report.deleted.agents:
            log.info("retention: deleted %s agents (%s steps) that ended before %s",
                     report.deleted.agents, report.deleted.steps, cutoff.isoformat())
        return report


def deletable(store: DeletionStore, expired: Sequence[Links], cutoff: datetime) -> list[uuid.UUID]:
    """Of `expired` and the agents found to depend on them, those no kept agent depends on."""
    known = {a.id: a for a in expired}
    frontier: list[Links] = list(expired)
    unexplored: set[uuid.UUID] = set()
    while frontier:
        if len(known) >= MAX_LINKED:
            unexplored = {a.id for a in frontier}
            break
        found = store.linked({a.id for a in frontier}, {a.thread for a in frontier},
                             {a.caller_id for a in frontier if a.caller_id})
        frontier = [a for a in found if a.id not in known]
        known.update((a.id, a) for a in frontier)
    kept = {a.id for a in known.values()
            if a.completed_at is None or a.completed_at >= cutoff} | unexplored
    return [a for a in known if a not in _closure(kept, known)]


def _closure(kept: set[uuid.UUID], known: dict[uuid.UUID, Links]) -> set[uuid.UUID]:
    """`kept` with everything a kept agent depends on, of `known`: its caller, children,
    fork origin and earlier turns, and theirs."""
    children: dict[uuid.UUID, list[uuid.UUID]] = {}
    turns: dict[uuid.UUID, list[Links]] = {}
    for agent in known.values():
        if agent.caller_id:
            children.setdefault(agent.caller_id, []).append(agent.id)
        turns.setdefault(agent.thread, []).append(agent)
    closed = set(kept)
    todo = [known[a] for a in kept if a in known]
    while todo:
        agent = todo.pop()
        needs = [agent.caller_id, agent.forked_from_id, *children.get(agent.id, ())]
        needs += [t.id for t in turns.get(agent.thread, ()) if t.created_at < agent.created_at]
        for need in needs:
            if need is not None and need not in closed:
                closed.add(need)
                if need in known:
                    todo.append(known[need])
    return closed
