"""The task queue as the core sees it: the Dispatcher protocol and its in-memory fake.

The real one is Celery's (`workers.celery_app.CeleryDispatcher`); the core never
imports Celery. The event bus knows nothing of queues: an enqueue is the
dispatcher's own round trip.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol


class Dispatcher(Protocol):
    """Puts agents on the queue and pulls them off it (Celery in production)."""

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str | None = None) -> None:
        """Queue a run of the agent (on `queue`, else the default one); raises
        DependencyUnavailable if the broker cannot be reached."""

    def revoke(self, task_ids: Sequence[str]) -> None:
        """Tell workers to drop or stop these tasks (best effort)."""

    def not_queued(self, queue: str, task_ids: Collection[str]) -> set[str]:
        """Those of `task_ids` whose message is surely not waiting on `queue`: lost, or
        taken by a worker meanwhile. One it cannot tell of (a queue too long to read
        through) is left out. Raises DependencyUnavailable if the broker cannot be reached."""


@dataclass(frozen=True)
class Queued:
    """One enqueue as MemoryDispatcher recorded it."""

    agent_id: uuid.UUID
    task_id: str
    queue: str | None = None


class MemoryDispatcher:
    """A dispatcher for tests: records enqueues and revokes, in order, and can be made
    to fail like an unreachable broker (`failure`, raised by every enqueue). `waiting`
    is what its queues hold: every enqueue, until `take` removes it."""

    def __init__(self, *, failure: Exception | None = None) -> None:
        self.failure = failure
        self.queued: list[Queued] = []
        self.waiting: list[Queued] = []
        self.revoked: list[str] = []
        self._lock = threading.Lock()

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str | None = None) -> None:
        if self.failure is not None:
            raise self.failure
        with self._lock:
            self.queued.append(Queued(agent_id, task_id, queue))
            self.waiting.append(Queued(agent_id, task_id, queue))

    def take(self, *task_ids: str) -> None:
        """Take these tasks' messages off the queues, as a worker (or a lost Redis) does."""
        with self._lock:
            self.waiting = [q for q in self.waiting if q.task_id not in task_ids]

    def not_queued(self, queue: str, task_ids: Collection[str]) -> set[str]:
        with self._lock:
            waiting = {q.task_id for q in self.waiting if q.queue == queue}
        return set(task_ids) - waiting

    def revoke(self, task_ids: Sequence[str]) -> None:
        with self._lock:
            self.revoked.extend(task_ids)
