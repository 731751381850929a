"""Routing by model (docs/api.md §10): a queue per model, and who serves which.

Every agent is queued on its model's queue, `queue_for(agent.model)`, wherever it is
queued from: a create, the sweeper, a hand-back. A worker started with `--models A,B`
consumes only A's and B's queues. A worker without `--models` consumes the default
queue and every model's queue: the queues in use are listed in Redis (`QUEUES_KEY`,
added to by whoever first queues for a model, and by each worker for its own models),
and such a worker starts consuming a new model's queue within a second of its first
listing. So an agent waits on its model's queue, PENDING, until some worker that takes
that model is alive, and then starts without anything having to move it.

Workers advertise themselves in Redis (a key per worker with a TTL of a few heartbeat
intervals, listed in `WORKERS_KEY`), with the models they take (None: all of them). A
worker that dies stops being advertised when its key expires; one that stops warmly
withdraws at once. The API reads the adverts for `/readyz` and the metrics.

A model stays listed while it is in use, and nothing is kept of it once it is not: after
MODEL_IDLE_S (10 minutes) with nothing PENDING or RUNNING, no worker consumes its queue
or keeps any state of it, and `/metrics` has no series of it. Each listing is stamped
(`SEEN_KEY`), and a process lists a model again at its first enqueue more than
`relist_s` after its last listing. Every `prune_every_s` each worker lists and stamps
again the models with agents PENDING or RUNNING (a Redis restarted empty lists them
again so), and unlists (`QueueDirectory.prune`) those no live worker names, with nothing
on their queue, whose stamp is older than `prune_after_s`: by then no process trusts an
old listing of it, and whoever queues for it next lists it again. Their figures go with
them. A worker that takes every model stops consuming a model's queue, and forgets what
it keeps of the model, once the model has been unlisted for `forget_after_s`: longer
than a prune period, so a model in use that lost its listing is listed again first.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jarvis_agents.cluster_metrics import forget_models
from jarvis_agents.config import MODEL_IDLE_S

log = logging.getLogger(__name__)

DEFAULT_QUEUE = "jarvis-agents"  # a worker without --models consumes it too
QUEUE_PREFIX = "jarvis-agents@"
QUEUES_KEY = "jarvis:model-queues"  # set: the models whose queue is in use
SEEN_KEY = "jarvis:model-queues:seen"  # sorted set: model -> when last listed (Unix s)
WORKERS_KEY = "jarvis:workers"  # set: names of workers that advertised themselves
WORKER_KEY = "jarvis:worker:"  # + name: the advert (JSON), with a TTL
# With the default MODEL_IDLE_S, what a QueueDirectory derives from it: how long a process
# trusts that a model's queue is still listed before it lists it again (Redis may have
# restarted empty meanwhile); a stamp older than PRUNE_AFTER_S is trusted by no process
# (> RELIST_S, with room for clocks). A model idle since t0 is unlisted by t0 + 240 s
# (a stamp up to a prune period old, PRUNE_AFTER_S, a prune period) and forgotten by
# every worker 120 s later: within the 10 minutes.
RELIST_S = MODEL_IDLE_S / 10
PRUNE_AFTER_S = 3 * RELIST_S
PRUNE_EVERY_S = MODEL_IDLE_S / 10

# KEYS: the listed set, the stamps. ARGV: the cutoff, then models and their queues.
# Unlists each model whose stamp is older than the cutoff and whose queue is empty, in one
# step: an enqueue that listed it, or a message pushed on its queue, keeps it.
_PRUNE = """
local pruned = {}
for i = 2, #ARGV, 2 do
  local stamp = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[i]) or ARGV[1])
  if stamp < tonumber(ARGV[1]) and redis.call('LLEN', ARGV[i + 1]) == 0 then
    redis.call('SREM', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], ARGV[i])
    table.insert(pruned, ARGV[i])
  end
end
return pruned
"""


def queue_for(model: str | None) -> str:
    """The queue of agents of `model` (its name as the agent JSON gives it)."""
    return f"{QUEUE_PREFIX}{model}" if model else DEFAULT_QUEUE


def model_of(queue: str) -> str | None:
    """The model whose queue `queue` is; None for the default queue or another."""
    return queue.removeprefix(QUEUE_PREFIX) if queue.startswith(QUEUE_PREFIX) else None


def parse_models(value: str | None) -> tuple[str, ...] | None:
    """`--models A,B` as a tuple of names (None: every model); blank names dropped."""
    if value is None:
        return None
    return tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))


@dataclass(frozen=True)
class WorkerAdvert:
    """A live worker as it advertises itself."""

    name: str
    models: tuple[str, ...] | None  # None: every model
    concurrency: int
    running: int

    def takes(self, model: str) -> bool:
        return self.models is None or model in self.models


def unserved(pending_models: Iterable[str], workers: Sequence[WorkerAdvert]) -> list[str]:
    """The models among `pending_models` that no live worker takes, sorted."""
    return sorted({m for m in pending_models if not any(w.takes(m) for w in workers)})


class QueueDirectory:
    """The models' queues in use and the live workers, as recorded in Redis."""

    def __init__(
        self, redis_client: Any, *, clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time, idle_s: float = MODEL_IDLE_S,
    ) -> None:
        self.redis = redis_client
        self.clock = clock
        self.wall = wall  # the listings' stamps: shared by processes, so Unix time
        # Every process of a system must be given the same idle_s (Settings.model_idle_s).
        self.relist_s = idle_s * RELIST_S / MODEL_IDLE_S
        self.prune_after_s = idle_s * PRUNE_AFTER_S / MODEL_IDLE_S
        self.prune_every_s = idle_s * PRUNE_EVERY_S / MODEL_IDLE_S
        self.forget_after_s = 2 * self.prune_every_s
        self._listed: dict[str, float] = {}  # model -> when this process last listed it
        self._lock = threading.Lock()

    # --- queues --------------------------------------------------------------------

    def list_queue(self, model: str) -> None:
        """Record that `model`'s queue is in use (a Redis call at most once a relist_s)."""
        now = self.clock()
        with self._lock:
            if now - self._listed.get(model, -self.relist_s) < self.relist_s:
                return
            # Listings this process no longer trusts are kept no longer either.
            self._listed = {m: at for m, at in self._listed.items() if now - at < self.relist_s}
            self._listed[model] = now
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.sadd(QUEUES_KEY, model)
            pipe.zadd(SEEN_KEY, {model: self.wall()})
            pipe.execute()
        except Exception:
            with self._lock:
                self._listed.pop(model, None)
            raise

    def forget(self, model: str) -> None:
        """Forget this process's listing of `model` (a worker forgets the model)."""
        with self._lock:
            self._listed.pop(model, None)

    def models(self) -> set[str]:
        """The models whose queue is in use."""
        return {_text(m) for m in self.redis.smembers(QUEUES_KEY)}

    def depths(self) -> dict[str, int]:
        """Messages waiting on each model's queue (LLEN of each, one round trip)."""
        models = sorted(self.models())
        pipe = self.redis.pipeline(transaction=False)
        for model in models:
            pipe.llen(queue_for(model))
        return dict(zip(models, (int(n) for n in pipe.execute()), strict=True))

    def prune(self, busy: Callable[[], Iterable[str]]) -> list[str]:
        """List and stamp again the models `busy` names (those with agents PENDING or
        RUNNING); unlist the models no live worker names, stamped more than
        prune_after_s ago, with nothing on their queue, and drop their figures.
        Returns the models unlisted."""
        in_use = set(busy())
        named = {m for worker in self.workers() for m in worker.models or ()}
        now = self.wall()
        pipe = self.redis.pipeline(transaction=False)
        if in_use:
            pipe.sadd(QUEUES_KEY, *in_use)
            pipe.zadd(SEEN_KEY, dict.fromkeys(in_use, now))
        pipe.smembers(QUEUES_KEY)
        pipe.zrange(SEEN_KEY, 0, -1, withscores=True)
        listed, stamps = pipe.execute()[-2:]
        seen = {_text(m): score for m, score in stamps}
        unstamped = {m: now for m in map(_text, listed) if m not in seen}
        if unstamped:  # listed before stamps were kept: from now on, then
            self.redis.zadd(SEEN_KEY, unstamped, nx=True)
        cutoff = now - self.prune_after_s
        stale = sorted(m for m, stamp in seen.items()
                       if stamp < cutoff and m not in named and m not in in_use)
        if not stale:
            return []
        args: list[Any] = [cutoff]
        for model in stale:
            args += [model, queue_for(model)]
        script = self.redis.register_script(_PRUNE)
        pruned = [_text(m) for m in script(keys=[QUEUES_KEY, SEEN_KEY], args=args)]
        if pruned:
            forget_models(self.redis, pruned)
            log.info("model queues no longer in use, unlisted: %s", ", ".join(pruned))
        return pruned

    # --- workers -------------------------------------------------------------------

    def advertise(self, advert: WorkerAdvert, *, ttl_s: float) -> None:
        body = json.dumps({"models": list(advert.models) if advert.models is not None else None,
                           "concurrency": advert.concurrency, "running": advert.running})
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(WORKER_KEY + advert.name, body, px=max(1, int(ttl_s * 1000)))
        pipe.sadd(WORKERS_KEY, advert.name)
        if advert.models:
            pipe.sadd(QUEUES_KEY, *advert.models)
            pipe.zadd(SEEN_KEY, dict.fromkeys(advert.models, self.wall()))
        pipe.execute()

    def withdraw(self, name: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(WORKER_KEY + name)
        pipe.srem(WORKERS_KEY, name)
        pipe.execute()

    def workers(self) -> list[WorkerAdvert]:
        """The workers alive now (their advert has not expired); forgets the others."""
        names = sorted(_text(n) for n in self.redis.smembers(WORKERS_KEY))
        if not names:
            return []
        bodies = self.redis.mget([WORKER_KEY + name for name in names])
        alive, gone = [], []
        for name, body in zip(names, bodies, strict=True):
            if body is None:
                gone.append(name)
                continue
            data = json.loads(body)
            models = data.get("models")
            alive.append(WorkerAdvert(name, tuple(models) if models is not None else None,
                                      int(data.get("concurrency", 0)), int(data.get("running", 0))))
        if gone:
            self.redis.srem(WORKERS_KEY, *gone)
        return alive


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ignore(_: str) -> None:
    pass


class WorkerPresence:
    """A worker's side of routing: its advert, renewed each interval, and for a worker
    that takes every model, a subscription to each model's queue while it is listed."""

    FOLLOW_S = 0.5  # how often a worker that takes every model looks at the listing

    def __init__(
        self, directory: QueueDirectory, *, name: str, models: tuple[str, ...] | None,
        concurrency: int, running: Callable[[], int], subscribe: Callable[[str], None],
        interval_s: float, busy_models: Callable[[], Iterable[str]] | None = None,
        unsubscribe: Callable[[str], None] = _ignore, forget: Callable[[str], None] = _ignore,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.name = name
        self.models = models
        self.concurrency = concurrency
        self.running = running  # agents running here now
        self.subscribe = subscribe  # start consuming this queue
        self.unsubscribe = unsubscribe  # stop consuming this queue
        self.forget = forget  # drop what this process keeps of this model
        self.interval_s = interval_s
        self.busy_models = busy_models  # models with PENDING or RUNNING agents (None: no pruning)
        self.clock = clock
        self.subscribed: set[str] = set(models or ())
        self._unlisted_since: dict[str, float] = {}  # subscribed models not listed, since when
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ttl_s(self) -> float:
        """How long an advert outlives its worker: a few intervals (a late renewal is
        not a dead worker), at least 3 s."""
        return max(3.0, 3 * self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="jarvis-presence", daemon=True)
        self._thread.start()

    def withdraw(self) -> None:
        """Stop advertising, at once (no wait for the thread: a shutdown must not)."""
        self._stop.set()
        try:
            self.directory.withdraw(self.name)
        except Exception as exc:  # noqa: BLE001 - it expires anyway
            log.warning("could not withdraw this worker's advert: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.withdraw()

    def renew(self) -> None:
        self.directory.advertise(
            WorkerAdvert(self.name, self.models, self.concurrency, int(self.running())),
            ttl_s=self.ttl_s)

    def follow(self) -> None:
        """Start consuming the queues of models listed since the last look; stop, and
        forget the model, once one has been unlisted for the directory's forget_after_s."""
        if self.models is not None:
            return
        listed, now = self.directory.models(), self.clock()
        for model in sorted(listed - self.subscribed):
            self.subscribe(queue_for(model))
            self.subscribed.add(model)
            log.info("now taking agents of the model '%s' too", model)
        self._unlisted_since = {m: self._unlisted_since.get(m, now) for m in self.subscribed - listed}
        for model, since in sorted(self._unlisted_since.items()):
            if now - since >= self.directory.forget_after_s:
                self.unsubscribe(queue_for(model))
                self.subscribed.discard(model)
                del self._unlisted_since[model]
                self.directory.forget(model)
                self.forget(model)
                log.info("no longer taking agents of the model '%s': it is not in use", model)

    def _loop(self) -> None:
        renewed_at = -float("inf")
        pruned_at = time.monotonic()  # not at start: the advert goes first
        while True:
            try:
                if time.monotonic() - renewed_at >= self.interval_s:
                    self.renew()
                    renewed_at = time.monotonic()
                self.follow()
                due = time.monotonic() - pruned_at >= self.directory.prune_every_s
                if self.busy_models is not None and due:
                    pruned_at = time.monotonic()
                    self.directory.prune(self.busy_models)
            except Exception as exc:  # noqa: BLE001 - Redis restarts: the next round tries again
                log.warning("worker presence: %s", exc)
            if self._stop.wait(self.FOLLOW_S if self.models is None else self.interval_s):
                return
