"""kombu's Redis transport, with one client for its bookkeeping instead of one per call.

Every task a worker receives and acknowledges goes through `Channel.conn_or_acquire`,
which in kombu 5.x builds a new `redis.Redis` client each time it is called without
one (`_create_client`); in redis-py 8 that construction is the largest single cost
of taking a task (profiled: ~0.9 ms of CPU per agent, about a tenth of the worker's
CPU per agent). The client is thread-safe and shares the channel's connection pool,
so one per channel and pool does the same work. Selected for plain `redis://`
brokers in `workers.celery_app.create_celery`; everything else is kombu's.

Its QoS also records and clears each unacknowledged message (ZADD+HSET on receipt,
ZREM+HDEL on the late ack or a reject) in a plain pipeline instead of a MULTI/EXEC one: still
one round trip, half the commands to pack, send and parse. Nothing relies on the
pair being atomic: the only other reader, `restore_visible`, looks only at entries
older than the visibility timeout (an hour), and it restores by the hash entry
(`restore_by_tag`, under WATCH), so a pair seen half-written there is either not yet
visible or already gone. A worker that dies still leaves its received, unacknowledged
messages for the restore (tests/integration/test_direct_enqueue.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class QoS(kombu_redis.QoS):
    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Iterator[Any]:
        # kombu's own, but without MULTI/EXEC: what asks for a pipeline here is the
        # bookkeeping of receipt, ack and reject; restore_by_tag brings its own.
        if pipe:
            yield pipe
            return
        with self.channel.conn_or_acquire(client) as acquired:
            yield acquired.pipeline(transaction=False)


class Channel(kombu_redis.Channel):
    QoS = QoS
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
