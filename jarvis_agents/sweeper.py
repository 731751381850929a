"""The sweeper: every worker queues again what its queue no longer holds.

Each period (the heartbeat interval) it looks at the agents whose message may be gone:
those whose worker died (a stale heartbeat) or handed them back, and the PENDING ones
whose enqueue failed or that waited long (their message may have died with a worker
that had taken it, or with a Redis that restarted). It sends again only those whose
message is no longer on their queue (Dispatcher.not_queued), so the queue holds one
message per agent however long it waits (README, How it works). It also
FAILS the agents that waited too long for a person. Every agent is claimed in SQL
first, so however many workers sweep at once each is looked at once per period.

A sweeper that has just seen the database fail judges no heartbeat for a few intervals
after: every worker's heartbeats failed during the outage too, and need an interval to
resume.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jarvis_agents import approvals
from jarvis_agents.config import Settings
from jarvis_agents.delegation import Delegation
from jarvis_agents.dispatch import Dispatcher
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.events import EventBus
from jarvis_agents.lifecycle import utcnow
from jarvis_agents.routing import queue_for
from jarvis_agents.store.interface import AgentStore

log = logging.getLogger(__name__)

# Heartbeat intervals after the database last failed here during which the sweeper
# takes no heartbeat for stale: live workers need about one to beat again.
OUTAGE_GRACE_INTERVALS = 3
LOST = "lost its worker"  # a sweep's reason that is worth a warning


@dataclass(frozen=True)
class _Due:
    """An agent whose message may be gone, and the task id it would be sent under."""

    agent_id: uuid.UUID
    task_id: str
    why: str  # for the log: "lost its worker", "was handed back", "was PENDING"
    pending: bool


class Sweeper:
    """One worker's sweep; `last_outage` is when (time.monotonic()) its process last saw
    the database fail."""

    def __init__(
        self, *, repository: AgentStore, dispatcher: Dispatcher, events: EventBus,
        settings: Settings, last_outage: Callable[[], float],
    ) -> None:
        self.repository = repository
        self.dispatcher = dispatcher
        self.events = events
        self.settings = settings
        self.last_outage = last_outage
        self.delegation = Delegation(repository=repository, settings=settings,
                                     dispatcher=dispatcher, events=events)

    def sweep(self) -> int:
        """Queue again the agents whose message is gone; returns how many were sent.

        Each is claimed in SQL (AgentStore.requeue_*) before its queue is read, once per
        period however many workers sweep at once: a lost worker's once per staleness
        period, a handed-back one's once per interval (its worker enqueued it; a Redis
        restart may have lost it), a PENDING one's once per JARVIS_PENDING_REQUEUE.
        """
        now = utcnow()
        due: list[_Due] = []
        outage_grace_s = OUTAGE_GRACE_INTERVALS * self.settings.heartbeat_interval_s
        if time.monotonic() - self.last_outage() >= outage_grace_s:
            stale = self.repository.requeue_stale_running(
                stale_before=now - timedelta(seconds=self.settings.heartbeat_stale_s),
                handed_back_before=now - timedelta(seconds=self.settings.heartbeat_interval_s))
            due += [_Due(agent_id, f"{agent_id}:{attempt + 1}",
                         "was handed back" if handed_back else LOST, pending=False)
                    for agent_id, attempt, handed_back in stale]
        self._expire_approvals(now)
        self.delegation.sweep()  # wakes and cancels a crash left undone
        pending_before = now - timedelta(seconds=self.settings.pending_requeue_s)
        due += [_Due(agent_id, task_id, "was PENDING", pending=True)
                for agent_id, task_id in self.repository.requeue_pending(untouched_before=pending_before)]
        if not due:
            return 0
        models = self.repository.models_of([d.agent_id for d in due])
        gone = self._not_queued(due, models)  # Redis down: the next period looks again
        unsent = [d for d in due if d.task_id in gone]
        for done, item in enumerate(unsent):
            try:
                self.dispatcher.enqueue(item.agent_id, task_id=item.task_id,
                                        queue=queue_for(models.get(item.agent_id)))
            except DependencyUnavailable:
                self._forget([d for d in unsent[done:] if d.pending])
                raise
            log.log(logging.WARNING if item.why == LOST else logging.INFO,
                    "agent %s %s and its message is no longer queued; queued again (task %s)",
                    item.agent_id, item.why, item.task_id)
        return len(unsent)

    def _not_queued(self, due: Sequence[_Due], models: Mapping[uuid.UUID, str]) -> set[str]:
        """The task ids of `due` whose message is not on its model's queue: one look per queue."""
        by_queue: dict[str, list[str]] = {}
        for item in due:
            by_queue.setdefault(queue_for(models.get(item.agent_id)), []).append(item.task_id)
        gone: set[str] = set()
        for queue, task_ids in by_queue.items():
            gone |= self.dispatcher.not_queued(queue, task_ids)
        return gone

    def _forget(self, pending: Sequence[_Due]) -> None:
        """These PENDING agents' sends failed (Redis down): the next sweep, not a period
        later, sends them (an agent without a task id is claimed at once)."""
        for item in pending:
            self.repository.forget_task(item.agent_id)

    def _expire_approvals(self, now: datetime) -> int:
        """FAIL (`approval_timeout`) the agents that waited for a person too long."""
        timeout_s = self.settings.approval_timeout_s
        expired = 0
        for agent in self.repository.waiting_since(now - timedelta(seconds=timeout_s)):
            failed = approvals.expire(self.repository, agent, timeout_s=timeout_s)
            if failed is not None:  # the transition owed its webhook
                log.info("agent %s waited too long for an approval; FAILED", agent.id)
                self.events.publish_status(failed)
                expired += 1
        return expired
