"""The Celery application, configured from Settings; the dispatcher the API uses.

Pool: threads. An agent spends nearly all its time waiting on the model, so one
process runs `JARVIS_WORKER_CONCURRENCY` (default 200) agents at once as threads.
The threads pool sees a revoke in-process within milliseconds (prefork children
never see one for a running task) but has no time limits, so the ReACT loop
enforces its own deadlines.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from celery.utils.nodenames import anon_nodename
from kombu.exceptions import OperationalError as KombuOperationalError

from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.events import QueuePush
from jarvis_agents.routing import DEFAULT_QUEUE, QueueDirectory, model_of
from workers.broker import TRANSPORT

log = logging.getLogger(__name__)

RUN_AGENT = "jarvis.run_agent"
QUEUE = DEFAULT_QUEUE  # a model's agents go to its own queue: jarvis_agents.routing


def create_celery(settings: Settings) -> Celery:
    app = Celery("jarvis_agents", broker=settings.require_redis_url(), include=["workers.tasks"])
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_default_queue=QUEUE,
        # A task is acknowledged when it ends (an agent run: when it starts, see
        # workers.tasks); a warm shutdown hands back what it never started. An agent
        # whose worker died is queued again by the sweeper from its row
        # (workers.broker: no Redis bookkeeping for agent runs), and the attempt check
        # in SQL makes any second delivery harmless.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A worker takes a message only when a thread is free for it: with agent runs
        # acknowledged as they start, the prefetch count alone would let a busy worker
        # hold as many again waiting, out of reach of idle workers.
        worker_disable_prefetch=True,
        worker_pool="threads",
        worker_concurrency=settings.worker_concurrency,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_pool_limit=max(10, settings.worker_concurrency // 4),
        broker_transport_options={
            "visibility_timeout": 3600,
            # Many threads acknowledge at once; the default pool of 10 runs dry.
            "max_connections": settings.worker_concurrency + 20,
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
            "health_check_interval": 10,
            "retry_on_timeout": True,
            # Agent runs are recovered by the database (the sweeper), not by kombu's
            # unacked bookkeeping in Redis: workers.broker skips it for them.
            "untracked_tasks": (RUN_AGENT,),
        },
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    if urlsplit(str(app.conf.broker_url)).scheme == "redis":
        app.conf.broker_transport = TRANSPORT  # kombu's, minus a client per task
    return app


class CeleryDispatcher:
    """Sends agents to the queue; the API and the sweeper use it."""

    def __init__(self, app: Celery, *, directory: QueueDirectory | None = None) -> None:
        self.app = app
        self.directory = directory  # where a model's queue is listed as in use
        self._origin = anon_nodename()
        self._pushable = is_plain_redis(app)

    def queue_push(
        self, agent_id: uuid.UUID, *, task_id: str, queue: str = QUEUE
    ) -> QueuePush | None:
        """The message `enqueue` would send, for the caller to LPUSH onto the broker.

        It lets `AgentService.create` queue an agent in the same Redis round trip as its
        PENDING publish, instead of `send_task` (~1 ms of CPU: kombu builds a Redis
        client per publish, plus its retry wrapper). None when the broker is not a
        plain Redis list queue; then use `enqueue`.
        """
        if not self._pushable:
            return None
        self._list(queue)
        return QueuePush(
            queue,
            redis_task_message(self.app, RUN_AGENT, [str(agent_id)], task_id=task_id,
                               queue=queue, origin=self._origin),
        )

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str = QUEUE) -> None:
        try:
            self._list(queue)
            self.app.send_task(
                RUN_AGENT, args=[str(agent_id)], task_id=task_id, queue=queue,
                retry=True,
                retry_policy={"max_retries": 3, "interval_start": 0.1, "interval_step": 0.5,
                              "interval_max": 1.0},
            )
        except (KombuOperationalError, OSError) as exc:
            raise DependencyUnavailable(f"the task queue (Redis) is unreachable: {exc}") from None

    def _list(self, queue: str) -> None:
        """List a model's queue as in use, for the workers that take every model."""
        model = model_of(queue)
        if model is not None and self.directory is not None:
            try:
                self.directory.list_queue(model)
            except Exception as exc:  # noqa: BLE001 - Redis down: the push fails as well
                raise DependencyUnavailable(f"the task queue (Redis) is unreachable: {exc}") from None

    def revoke(self, task_ids: Sequence[str]) -> None:
        try:
            self.app.control.revoke(list(task_ids))
        except (KombuOperationalError, OSError) as exc:
            # The compare-and-set already cancelled it; workers also check the database.
            log.warning("could not broadcast the revoke of %s: %s", task_ids, exc)


def is_plain_redis(app: Celery) -> bool:
    """Whether the broker keeps each queue as a Redis list named after it, no key prefix."""
    scheme = urlsplit(str(app.conf.broker_url or "")).scheme
    options = app.conf.broker_transport_options or {}
    return scheme in {"redis", "rediss"} and not options.get("global_keyprefix")


def redis_task_message(
    app: Celery, name: str, args: list[Any], *, task_id: str, queue: str, origin: str
) -> str:
    """A Celery task message exactly as kombu's Redis transport stores it on `queue`'s list.

    Celery builds the protocol-2 task (`app.amqp.as_task_v2`: headers, properties,
    body); the envelope is what `Producer.publish` → `Channel.basic_publish` → `_put`
    would LPUSH (kombu/transport/virtual/base.py `prepare_message` and
    `_inplace_augment_message`, kombu/transport/redis.py `_put`): the JSON body
    base64-encoded, a fresh `delivery_tag` (the key of the unacked entry that
    `task_acks_late` and the visibility timeout rely on), priority 0 (the list named
    `queue`, no priority suffix), and the default exchange with the queue as routing
    key, which is where a restore after a lost worker puts the message back.
    tests/integration/test_direct_enqueue.py pins it against send_task's and a
    real worker.
    """
    headers, properties, body, _ = app.amqp.as_task_v2(
        task_id, name, args=args, origin=origin, ignore_result=bool(app.conf.task_ignore_result),
        argsrepr=repr(args), kwargsrepr="{}",  # Celery's saferepr costs more than the rest
    )
    return json.dumps({
        "body": base64.b64encode(json.dumps(body).encode()).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            **properties,
            "delivery_mode": 2,  # persistent
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    })
