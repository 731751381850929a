"""Celery tasks: an agent id in, a runner call out. No logic lives here."""

from __future__ import annotations

import uuid

from celery import shared_task
from celery.worker import state as worker_state

from jarvis_agents.webhooks import RETRY_DELAYS_S
from workers.celery_app import DELIVER_WEBHOOK, RUN_AGENT


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


@shared_task(name=DELIVER_WEBHOOK, bind=True, max_retries=len(RETRY_DELAYS_S))
def deliver_webhook(self, agent_id: str) -> None:  # type: ignore[no-untyped-def]
    if not self.app.jarvis.webhooks.deliver(uuid.UUID(agent_id)):
        delay = RETRY_DELAYS_S[min(self.request.retries, len(RETRY_DELAYS_S) - 1)]
        if self.request.retries < len(RETRY_DELAYS_S):
            raise self.retry(countdown=delay)
