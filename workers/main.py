"""`jarvis-agents worker`: one Celery worker process with its runner attached."""

from __future__ import annotations

import logging

from jarvis_agents.components import build_worker
from jarvis_agents.config import Settings
from workers.celery_app import QUEUE, CeleryDispatcher, create_celery

log = logging.getLogger(__name__)


def run_worker(settings: Settings, *, concurrency: int | None = None, loglevel: str = "INFO") -> None:
    if concurrency is not None:
        settings = settings.with_overrides(worker_concurrency=concurrency)
    app = create_celery(settings)
    components = build_worker(settings, CeleryDispatcher(app))
    app.jarvis = components  # the tasks reach the runner through their app
    components.runner.start_background(redis_client=components.redis)
    try:
        app.worker_main([
            "worker", f"--loglevel={loglevel}", "--pool=threads",
            f"--concurrency={settings.worker_concurrency}", f"--queues={QUEUE}",
            "--without-gossip", "--without-mingle",
        ])
    finally:
        components.close()
