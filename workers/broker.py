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

Messages of the tasks named in the transport option `untracked_tasks` (the agent
runs: `workers.celery_app`) get no Redis bookkeeping at all. For them it only
duplicated the database, at a fifth of the worker's CPU (py-spy: the receipt's
ZADD+HSET ~10 % of its GIL time, the ack's ZREM+HDEL ~11 %). Every agent's record
is its row: a worker that dies leaves its agents RUNNING with a heartbeat that goes
stale, or PENDING, and the sweeper queues them again within a minute, where kombu's
restore would have waited out the visibility timeout (an hour) to deliver a message
whose claim would then do nothing. Such a message is still held in memory until
its ack, so the prefetch limit counts it, and a worker that closes its channel
(a warm shutdown) still puts back the ones it never acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual


class QoS(kombu_redis.QoS):
    def append(self, message: Any, delivery_tag: str) -> None:
        if self._untracked(message):
            virtual.QoS.append(self, message, delivery_tag)  # the prefetch count, in memory
            return
        super().append(message, delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        if self._untracked(self._delivered.get(delivery_tag)):
            virtual.QoS.ack(self, delivery_tag)
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        message = self._delivered.get(delivery_tag)
        if self._untracked(message):
            if requeue:
                self._put_back(message, leftmost=True)
            virtual.QoS.ack(self, delivery_tag)
            return
        super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client: Any = None) -> None:
        """Put back what was delivered and not acknowledged: the untracked messages from
        memory, the others from Redis (kombu's way)."""
        self._flush()  # forget what was acknowledged meanwhile
        with self.channel.conn_or_acquire(client) as acquired:
            for tag, message in list(self._delivered.items()):
                if self._untracked(message):
                    self._put_back(message, client=acquired)
                else:
                    self.restore_by_tag(tag, client=acquired)
        self._delivered.clear()

    def _untracked(self, message: Any) -> bool:
        """Whether this delivered message is one kept in memory only (None: not held)."""
        return message is not None and (
            (message.headers or {}).get("task") in self.channel.untracked_tasks)

    def _put_back(self, message: Any, *, client: Any = None, leftmost: bool = False) -> None:
        """The message onto its queue again, as kombu's restore would from Redis."""
        delivery = message.delivery_info
        with self.channel.conn_or_acquire(client) as acquired:
            self.channel._do_restore_message(
                message._raw, delivery["exchange"], delivery["routing_key"], acquired, leftmost)

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
    untracked_tasks: tuple[str, ...] = ()
    from_transport_options = (*kombu_redis.Channel.from_transport_options, "untracked_tasks")

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
