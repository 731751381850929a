"""kombu's Redis transport, with one client for its bookkeeping instead of one per call.

Every task a worker receives and acknowledges goes through `Channel.conn_or_acquire`,
which in kombu 5.x builds a new `redis.Redis` client each time it is called without
one (`_create_client`); in redis-py 8 that construction is the largest single cost
of taking a task (profiled: ~0.9 ms of CPU per agent, about a tenth of the worker's
CPU per agent). The client is thread-safe and shares the channel's connection pool,
so one per channel and pool does the same work. Selected for plain `redis://`
brokers in `workers.celery_app.create_celery`; everything else is kombu's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _bookkeeping: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        cached = self._bookkeeping
        if cached is None or cached.connection_pool is not pool:
            # First use, or kombu replaced the pool after a connection error.
            cached = self._bookkeeping = self._create_client()
        yield cached


class Transport(kombu_redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
