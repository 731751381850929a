"""Dispatchers for tests that drive the service without a queue."""

from __future__ import annotations

import uuid


class NoQueue:
    """The service's dispatcher: nothing is queued in these tests."""

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str | None = None) -> None:
        pass

    def revoke(self, task_ids: object) -> None:
        pass
