"""The scheduler: every worker fires the schedules that are due (README, Schedules).

Every worker runs this loop, in its supervisor process (workers/main.py: a thousand
agents' threads in the Celery process would starve it of the interpreter), each tick (a
second) taking due schedules in batches until none is left. There is no elected leader that could die: which process
fires a due time is decided in the database, by a compare-and-set on the due time
(store/schedules.py), so however many workers run, a due time makes one agent, and
while any of them runs, it makes it within seconds.

A schedule's agent is built as a create builds it (AgentService.prepare: its assistant's
current version, the create fields of its template) and queued as a create queues it;
it is not refused by the per-user active limit, as delegated children are not: no
client is there to be told 429 and retry, and `overlap: "skip"` keeps each schedule to
one agent at a time. Due times missed while no worker ran collapse into one firing,
`scheduled_for` the latest of them.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

from jarvis_agents.errors import Conflict, JarvisError, NotFound, first_line
from jarvis_agents.lifecycle import Agent, utcnow
from jarvis_agents.schedules import Firing, Schedule, plan
from jarvis_agents.service import AgentService

log = logging.getLogger(__name__)

TICK_S = 1.0
# Schedules fired per transaction: a batch's row locks are held while its agents are built.
BATCH = 200
# Threads publishing and queueing fired agents, each a Redis round trip or two.
ANNOUNCERS = 8

# What the loop reports of each due time: ("fired" | "skipped", seconds late).
Outcome = Callable[[str, float], None]


class Scheduler:
    """One worker's firing loop over the service that builds and queues agents."""

    def __init__(self, service: AgentService, *, outcome: Outcome = lambda _o, _s: None,
                 tick_s: float = TICK_S, batch: int = BATCH) -> None:
        self.service = service
        self.store = service.repository.schedules
        self.outcome = outcome
        self.tick_s = tick_s
        self.batch = batch
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._announcers = ThreadPoolExecutor(ANNOUNCERS, thread_name_prefix="jarvis-announce")

    def fire(self, now: datetime | None = None) -> list[Firing]:
        """Fire everything due at `now` (default: the clock's), batch after batch; the
        firings this process won."""
        won: list[tuple[Firing, datetime]] = []
        try:
            while True:
                at = now or utcnow()
                firings = self.store.fire_due(at, limit=self.batch, decide=self.decide)
                won += [(firing, at) for firing in firings]
                if len(firings) < self.batch:
                    return [firing for firing, _ in won]
        finally:
            # Every due agent's row first, then the queue: a row committed is a due time
            # kept (the sweeper queues a PENDING agent whose message never went), and the
            # rows of a burst are not held up by the queueing of the agents before them,
            # two round trips to Redis each, done by a few threads at once.
            for done in [self._announcers.submit(self._announce, *each) for each in won]:
                done.result()

    def decide(self, schedule: Schedule, last_ended: bool, now: datetime) -> Firing:
        """What the schedule's due time at `now` does: an agent, or a skip."""
        due, following = plan(schedule.cron, schedule.timezone, schedule.next_run_at, now)
        skip = Firing(schedule, due, following, None, schedule.thread_id)
        if schedule.overlap == "skip" and not last_ended:
            return skip
        try:
            agent = self.service.schedules.agent_of(schedule.user_id, schedule.goal,
                                                    schedule.template)
        except JarvisError as exc:  # its assistant or a tool gone since the schedule was made
            log.warning("schedule %s skips its due time %s: %s", schedule.id, due, exc)
            return skip
        agent = replace(agent, schedule_id=schedule.id, scheduled_for=due, created_at=now,
                        updated_at=now)
        thread_id = None
        if schedule.thread == "same":
            agent, thread_id = self._in_thread(schedule, agent)
            if agent is None:
                return skip
        return Firing(schedule, due, following, agent, thread_id)

    def _in_thread(self, schedule: Schedule, agent: Agent) -> tuple[Agent | None, uuid.UUID]:
        """The run as a follow-up in the schedule's thread (its first run starts it);
        None while an agent of the thread has not ended."""
        if schedule.thread_id is None:
            return agent, agent.id
        try:
            return self.service.as_follow_up(agent, schedule.thread_id), schedule.thread_id
        except Conflict:
            return None, schedule.thread_id
        except NotFound:  # the thread's agents were deleted: this run starts it again
            return agent, agent.id

    def _announce(self, firing: Firing, now: datetime) -> None:
        lag_s = max(0.0, (now - firing.due).total_seconds())
        if firing.agent is None:
            log.info("schedule %s skipped its due time %s", firing.schedule.id, firing.due)
            self.outcome("skipped", lag_s)
            return
        self.service.announce(firing.agent)
        self.outcome("fired", lag_s)

    # --- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="jarvis-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._announcers.shutdown(wait=True)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.fire()
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                log.warning("firing schedules failed: %s", first_line(exc))
            self._stopping.wait(self.tick_s)

