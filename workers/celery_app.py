"""The Celery application, configured from Settings; the dispatcher the API uses.

Pool: threads. An agent spends nearly all its time waiting on the model, so one
process runs `JARVIS_WORKER_CONCURRENCY` (default 200) agents at once as threads.
The threads pool sees a revoke in-process within milliseconds (prefork children
never see one for a running task) but has no time limits, so the ReACT loop
enforces its own deadlines.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Sequence
from typing import Any, Final

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.routing import DEFAULT_QUEUE, QueueDirectory, model_of

log = logging.getLogger(__name__)

RUN_AGENT = "jarvis.run_agent"
QUEUE = DEFAULT_QUEUE  # a model's agents go to its own queue: jarvis_agents.routing
# A broker that does not answer is retried briefly, then the agent is left to the
# sweeper (the caller clears its task id): a create never waits long on Redis.
ENQUEUE_RETRY: Final = {"max_retries": 3, "interval_start": 0.1, "interval_step": 0.5,
                        "interval_max": 1.0}
# How many of a queue's messages `not_queued` reads at most, from the oldest on: a message
# deeper than that is not known to be lost until the queue is shorter.
LOOK_DEPTH = 1000
LOOK_PAGE = 100

# KEYS: the queue, a list kombu pushes on the left and workers take from the right; its
# messages are JSON whose first `"id": "…"` is the task id (Celery's message protocol 2:
# headers.id; tests/integration/test_direct_enqueue.py holds it to that). ARGV: the most
# messages to read, then the task ids looked for. Reads from the oldest message on, a
# page at a time, until every task id is found or that many were read; atomic, so no
# message moves while it reads. Returns 1 if it read the whole queue (else 0), then the
# task ids found.
_LOOK = f"""
local wanted, left = {{}}, #ARGV - 1
for i = 2, #ARGV do wanted[ARGV[i]] = true end
local found = {{0}}
local length = redis.call('LLEN', KEYS[1])
local limit = math.min(length, tonumber(ARGV[1]))
local read = 0
while left > 0 and read < limit do
  local n = math.min({LOOK_PAGE}, limit - read)
  local page = redis.call('LRANGE', KEYS[1], -read - n, -read - 1)
  for j = #page, 1, -1 do
    local at = string.find(page[j], '"id": "', 1, true)
    local stop = at and string.find(page[j], '"', at + 7, true)
    if stop then
      local id = string.sub(page[j], at + 7, stop - 1)
      if wanted[id] then wanted[id] = nil; left = left - 1; found[#found + 1] = id end
    end
  end
  read = read + n
end
if read >= length then found[1] = 1 end
return found
"""


def create_celery(settings: Settings) -> Celery:
    app = Celery("jarvis_agents", broker=settings.require_redis_url(), include=["workers.tasks"])
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_default_queue=QUEUE,
        # A task is acknowledged when it ends (an agent run: when it starts, see
        # workers.tasks); a warm shutdown hands back what it never started. An agent
        # whose worker died is queued again by the sweeper from its row (no Redis
        # bookkeeping: `ack_emulation` below), and the attempt check in SQL makes any
        # second delivery harmless.
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
            # Many threads acknowledge at once; the default pool of 10 runs dry.
            "max_connections": settings.worker_concurrency + 20,
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
            "health_check_interval": 10,
            "retry_on_timeout": True,
            # Agent runs are recovered by the database (the sweeper, within a minute),
            # not by kombu's unacked hash in Redis, which only duplicated the record
            # at a large share of the worker's CPU (ZADD+HSET on receipt and
            # ZREM+HDEL on the ack) and would redeliver a lost message only after
            # its visibility timeout, an hour (celery/celery#4984), to a claim that
            # then does nothing. A delivered message is still held in memory until
            # its ack, so the prefetch limit counts it, and a worker that closes its
            # channel (a warm shutdown) still puts back the ones it never acknowledged
            # (kombu's virtual QoS: tests/integration/test_direct_enqueue.py).
            "ack_emulation": False,
        },
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app


class CeleryDispatcher:
    """Sends agents to the queue; the API and the sweeper use it."""

    def __init__(self, app: Celery, *, directory: QueueDirectory | None = None) -> None:
        self.app = app
        self.directory = directory  # where a model's queue is listed as in use
        self._look: Any = None  # the _LOOK script, registered at its first use

    def enqueue(
        self, agent_id: uuid.UUID, *, task_id: str, queue: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """One `send_task`: one LPUSH onto the queue's Redis list; `headers` go into the
        message's (a trace context: workers/tracing.py)."""
        args = [str(agent_id)]
        queue = queue or QUEUE
        try:
            self._list(queue)
            self.app.send_task(
                RUN_AGENT, args=args, task_id=task_id, queue=queue,
                retry=True, retry_policy=ENQUEUE_RETRY, headers=headers,
                # What monitoring shows of the arguments, given: Celery's saferepr of
                # them is a needless part of the send's CPU.
                argsrepr=repr(args), kwargsrepr="{}",
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

    def not_queued(self, queue: str, task_ids: Collection[str]) -> set[str]:
        """One script call: the task ids not among the queue's messages, if it read them
        all (up to LOOK_DEPTH from the oldest; it stops once it found every one).
        Without a directory (its Redis client) nothing can be told: none."""
        if self.directory is None or not task_ids:
            return set()
        if self._look is None:
            self._look = self.directory.redis.register_script(_LOOK)
        try:
            whole, *found = self._look(keys=[queue], args=[LOOK_DEPTH, *task_ids])
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise DependencyUnavailable(f"the task queue (Redis) is unreachable: {exc}") from None
        if not whole:
            return set()
        return set(task_ids) - {t.decode() if isinstance(t, bytes) else t for t in found}

    def revoke(self, task_ids: Sequence[str]) -> None:
        try:
            self.app.control.revoke(list(task_ids))
        except (KombuOperationalError, OSError) as exc:
            # The compare-and-set already cancelled it; workers also check the database.
            log.warning("could not broadcast the revoke of %s: %s", task_ids, exc)
