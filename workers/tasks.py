"""Celery tasks: an agent id in, a runner call out. No logic lives here."""

from __future__ import annotations

import uuid

from celery import shared_task
from celery.worker import state as worker_state

from workers.celery_app import RUN_AGENT


@shared_task(name=RUN_AGENT, bind=True)
def run_agent(self, agent_id: str) -> None:  # type: ignore[no-untyped-def]
    task_id = self.request.id
    self.app.jarvis.runner.run(
        uuid.UUID(agent_id), task_id=task_id,
        is_revoked=lambda: task_id in worker_state.revoked,
    )
