"""Celery tasks: an agent id in, a runner call out. No logic lives here."""

from __future__ import annotations

import uuid

from celery import shared_task
from celery.worker import state as worker_state

from workers.celery_app import RUN_AGENT


# Acknowledged as it starts, not as it ends: the agent's row is its record once it
# runs (a worker that dies leaves it to the sweeper, a warm shutdown hands it back).
# A message held unacknowledged while its agent runs buys nothing, and on a Redis
# restart kombu (5.7) fails restoring it to the queue, which stops the worker's
# consumer until its running agents end (workers.main).
@shared_task(name=RUN_AGENT, bind=True, acks_late=False)
def run_agent(self, agent_id: str) -> None:  # type: ignore[no-untyped-def]
    task_id = self.request.id
    self.app.jarvis.runner.run(
        uuid.UUID(agent_id), task_id=task_id,
        is_revoked=lambda: task_id in worker_state.revoked,
    )
