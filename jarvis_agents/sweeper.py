"""The sweeper: every worker queues again what its queue no longer holds.

Each period (the heartbeat interval) it re-enqueues the agents whose worker died (a
stale heartbeat) or handed them back, and the agents whose message may be lost (an
enqueue that failed while the broker was down, or one a killed worker had taken); it
also FAILS the agents that waited too long for a person. Every agent is claimed in SQL
first, so however many workers sweep at once each is queued once per period.

A sweeper that has just seen the database fail judges no heartbeat for a few intervals
after: every worker's heartbeats failed during the outage too, and need an interval to
resume.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from jarvis_agents import approvals
from jarvis_agents.config import Settings
from jarvis_agents.dispatch import Dispatcher
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.events import EventBus
from jarvis_agents.lifecycle import utcnow
from jarvis_agents.routing import QueueDirectory, queue_for
from jarvis_agents.store.interface import AgentStore

log = logging.getLogger(__name__)

# Heartbeat intervals after the database last failed here during which the sweeper
# takes no heartbeat for stale: live workers need about one to beat again.
OUTAGE_GRACE_INTERVALS = 3


class Sweeper:
    """One worker's sweep; `last_outage` is when (time.monotonic()) its process last saw
    the database fail."""

    def __init__(
        self, *, repository: AgentStore, dispatcher: Dispatcher, events: EventBus,
        settings: Settings, directory: QueueDirectory | None, last_outage: Callable[[], float],
    ) -> None:
        self.repository = repository
        self.dispatcher = dispatcher
        self.events = events
        self.settings = settings
        self.directory = directory  # who serves which model; None: take every model as served
        self.last_outage = last_outage

    def sweep(self) -> int:
        """Queue again the agents whose attempt is gone or whose message may be lost.

        Each agent is claimed in SQL before its enqueue, once per period, however many
        workers sweep at once (AgentStore.requeue_*). Returns how many were queued.
        """
        count = 0
        now = utcnow()
        stale_before = now - timedelta(seconds=self.settings.heartbeat_stale_s)
        outage_grace_s = OUTAGE_GRACE_INTERVALS * self.settings.heartbeat_interval_s
        served = self._served_models()
        if time.monotonic() - self.last_outage() >= outage_grace_s:
            stale = self.repository.requeue_stale_running(stale_before=stale_before)
            models = self.repository.models_of([agent_id for agent_id, _, _ in stale])
            for agent_id, attempt, handed_back in stale:
                if not served(models.get(agent_id)):
                    continue  # another sweep queues it once a worker takes its model
                if handed_back:
                    log.info("agent %s was handed back (attempt %s); re-enqueueing", agent_id, attempt)
                else:
                    log.warning("agent %s lost its worker (attempt %s); re-enqueueing", agent_id, attempt)
                self.dispatcher.enqueue(agent_id, task_id=f"{agent_id}:{attempt + 1}",
                                        queue=queue_for(models.get(agent_id)))
                count += 1
        self._expire_approvals(now)
        # A message a killed worker had taken is gone with it (no unacked bookkeeping in
        # Redis: workers.celery_app), and one whose enqueue failed was never sent; the
        # claim's compare-and-set makes a duplicate a no-op. An agent whose model no live
        # worker takes is not queued again: its message waits on its model's queue.
        pending_before = now - timedelta(seconds=self.settings.pending_requeue_s)
        claimed = self.repository.requeue_pending(untouched_before=pending_before)
        models = self.repository.models_of([agent_id for agent_id, _ in claimed])
        claimed = [(agent_id, task_id) for agent_id, task_id in claimed if served(models.get(agent_id))]
        for done, (agent_id, task_id) in enumerate(claimed):
            try:
                self.dispatcher.enqueue(agent_id, task_id=task_id, queue=queue_for(models.get(agent_id)))
            except DependencyUnavailable:
                for unsent, _ in claimed[done:]:
                    self.repository.forget_task(unsent)  # for the next sweep
                raise
            log.info("agent %s was not on the queue or waited long; re-enqueued", agent_id)
            count += 1
        return count

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

    def _served_models(self) -> Callable[[str | None], bool]:
        """Whether some live worker takes a model, as the adverts say now (routing)."""
        if self.directory is None:
            return lambda _model: True
        try:
            workers = self.directory.workers()
        except Exception as exc:  # noqa: BLE001 - Redis down: the enqueues fail as well
            log.warning("sweep: could not read the workers' adverts: %s", exc)
            return lambda _model: True
        return lambda model: model is None or any(w.takes(model) for w in workers)
