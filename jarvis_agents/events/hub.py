"""The event hub: one Redis pub/sub connection per API process, fanned out to streams.

A thousand open SSE streams must not mean a thousand Redis connections. The hub
subscribes its one connection to the channels its streams watch — the first stream
of a channel has it subscribed, the last one to leave unsubscribed — and hands each
message to the subscriptions registered for its channel. Only the hub's reader
touches the connection: a stream records what it watches and wakes the reader (a
pipe it waits on beside the socket), which brings the connection's subscriptions in
line with it. An API process with no stream open on an agent does not hear that
agent's events: subscribing to every channel by pattern made each API process read
and discard every event of every agent (CPU per agent, paid again for every API process
added). Its reader runs in a background thread (a greenlet under gevent) and reconnects by
itself; because messages sent while it was away are lost, every (re)connection and
every overflowing queue tells the subscribers to `RESYNC` — catch up from the
database, which is the record.

A lost step shows up as a gap in `seq`; a lost terminal status shows up as nothing
at all. Rather than every stream re-reading its agent every few seconds (a thousand
streams opened together made bursts of a thousand queries on a 20-connection pool,
which delayed live events by seconds), the hub's status check reads, every
`every_s`, the status of all the agents that have subscribers in one query
(`ended_agents`), and hands a terminal status to their subscriptions the way a
published one arrives.

While a stream waits with nothing queued it may lend the hub a writer
(`Subscription.get(writer=…)`, see `api.sse.SocketWriter`): the hub then hands a
message to the writer instead of queueing it and waking the stream, which is what
lets one event reach a thousand streams of a hot agent in one pass.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from jarvis_agents.events.messages import AGENT_CHANNEL, Message, decode
from jarvis_agents.events.subscription import CLOSED, RESYNC, Signal, Subscription
from jarvis_agents.events.tokens import Listen, TokenListeners
from jarvis_agents.lifecycle import Agent

log = logging.getLogger(__name__)

# A hub's own channel (this prefix and a token of its own) is subscribed first on every
# connection and never left: its confirmation says the hub is (again) connected, so that
# streams catch up with what they may have missed; and a publish on it wakes the reader
# when the channels to watch change (redis-py offers no public handle on the pub/sub
# socket to wait on beside a pipe of our own).
HUB_CHANNEL: Final = "jarvis:hub"
# How long a stream's subscribe waits for Redis to confirm that its channel is heard.
CONFIRM_WAIT_S: Final = 1.0

AGENT_PREFIX: Final = AGENT_CHANNEL.format("")
IDS_PER_QUERY = 1000  # bounds a statement's size; one query each time for up to this many

# Given agent ids, the status (the value, e.g. "COMPLETED") of those that have ended.
EndedReader = Callable[[Sequence[uuid.UUID]], dict[uuid.UUID, str]]


class AgentReader(Protocol):
    def get_many(self, agent_ids: Sequence[uuid.UUID]) -> list[Agent]: ...


def ended_agents(store: AgentReader) -> EndedReader:
    """The hub's status check reading `store`: of the agents given, the terminal status of
    those that have ended, by id, in one query per IDS_PER_QUERY agents."""

    def read(agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        ended: dict[uuid.UUID, str] = {}
        for start in range(0, len(agent_ids), IDS_PER_QUERY):
            for agent in store.get_many(agent_ids[start : start + IDS_PER_QUERY]):
                if agent.is_terminal:
                    ended[agent.id] = agent.status.value
        return ended

    return read


class EventHub:
    """Fans the messages of one Redis pub/sub connection out to Subscriptions."""

    def __init__(
        self, redis_client: Any, *, read_ended: EndedReader | None = None, recheck_s: float = 5.0,
        first_connect_wait_s: float = 2.0, max_backoff_s: float = 5.0,
    ) -> None:
        """`read_ended` (see `ended_agents`): the status check, every `recheck_s`, started
        by the first subscription to an agent's channel; without it, none."""
        self.redis = redis_client
        self.read_ended = read_ended
        self.recheck_s = recheck_s
        self.first_connect_wait_s = first_connect_wait_s
        self.max_backoff_s = max_backoff_s
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        # A channel's Event is set once Redis confirms the hub's subscription to it.
        self._heard: dict[str, threading.Event] = {}
        self._changed = False  # the watched channels changed since the reader looked
        self._confirmed: set[str] = set()  # the reader's: channels Redis confirmed
        self._lock = threading.Lock()
        self.channel = f"{HUB_CHANNEL}:{uuid.uuid4().hex}"
        self._closing = threading.Event()
        self._first_attempt = threading.Event()
        self._connected = False
        self._thread: threading.Thread | None = None
        self._checker: threading.Thread | None = None
        self.token_listeners = TokenListeners(redis_client)

    @property
    def connected(self) -> bool:
        """Whether live messages are flowing; when not, streams poll the database."""
        return self._connected

    def subscribe(self, channel: str) -> Subscription:
        """Register for a channel's messages, from now on (join before reading the record)."""
        subscription = Subscription(channel, source=self)
        if self.read_ended is not None and channel.startswith(AGENT_PREFIX):
            self.check_ended(self.read_ended, every_s=self.recheck_s)
        if self._closing.is_set():
            subscription.put(CLOSED)
            return subscription
        with self._lock:
            self._subscriptions[channel].add(subscription)
            heard = self._heard.get(channel)
            first = heard is None
            if first:
                heard = self._heard[channel] = threading.Event()
                self._changed = True
        if first:
            self._wake()
        self._start()
        # Only the very first streams wait, so that they do not miss what is
        # published while the connection comes up; if Redis is down they poll.
        self._first_attempt.wait(self.first_connect_wait_s)
        if self._connected:
            # Joined before the stream reads the record: nothing published after
            # this returns is missed. (A lost wait is covered all the same: a gap in
            # seq makes the stream re-read the record, and the status check ends it.)
            heard.wait(CONFIRM_WAIT_S)
        return subscription

    def listen_tokens(self, agent_id: uuid.UUID) -> Listen:
        """Have the workers publish the agent's tokens until the result is closed."""
        return self.token_listeners.listen(agent_id)

    def check_ended(self, read_ended: EndedReader, *, every_s: float) -> None:
        """Start the status check: every `every_s`, one read for all the watched agents.

        The first call starts the check with its reader (`subscribe` calls it, given
        `read_ended`), later ones change nothing. A terminal status found reaches
        the agent's subscriptions as a status Message, the same as a publish.
        """
        if self._checker is not None or self._closing.is_set():
            return
        with self._lock:
            if self._checker is None:
                self._checker = threading.Thread(
                    target=self._check, args=(read_ended, every_s), name="jarvis-status-check",
                    daemon=True,
                )
                self._checker.start()

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            subscribers = self._subscriptions.get(subscription.channel)
            if subscribers is None:
                return
            subscribers.discard(subscription)
            if subscribers:
                return
            del self._subscriptions[subscription.channel]
            del self._heard[subscription.channel]
            # Left at the reader's next look, unwoken: a message for a channel nobody
            # watches is dropped meanwhile (_handle).
            self._changed = True

    def _wake(self) -> None:
        """Have the reader look at the watched channels now (a publish on its own channel)."""
        try:
            self.redis.publish(self.channel, "")
        except Exception as exc:  # noqa: BLE001 - Redis away: the reconnect subscribes all
            log.debug("could not wake the event hub's reader: %s", exc)

    def subscriber_count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._subscriptions.values())

    def close(self) -> None:
        """Stop reading and tell every open stream to end."""
        self._closing.set()
        self.token_listeners.close()
        with self._lock:
            everyone = [s for subs in self._subscriptions.values() for s in subs]
        for subscription in everyone:
            subscription.put(CLOSED)
        self._wake()
        for thread in (self._thread, self._checker):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=3)

    # --- the reader ------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jarvis-event-hub", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        backoff_s = 0.2
        while not self._closing.is_set():
            pubsub = self.redis.pubsub()
            subscribed: set[str] = set()  # what this connection was asked to hear
            self._confirmed = set()  # … and what Redis confirmed it hears
            try:
                pubsub.subscribe(self.channel)
                self._changed = True  # every watched channel, on this connection
                while not self._closing.is_set():
                    if self._changed:
                        self._resubscribe(pubsub, subscribed)
                    raw = pubsub.get_message(timeout=1.0)  # a wake-up is a message too
                    if raw is not None:
                        self._handle(raw)
                        backoff_s = 0.2
            except Exception as exc:  # noqa: BLE001 - Redis restarts; reconnect and resync
                if self._connected:
                    log.warning("event hub lost Redis (%s); reconnecting", exc)
                self._connected = False
                self._first_attempt.set()
                self._closing.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.max_backoff_s)
            finally:
                with self._lock:
                    for heard in self._heard.values():
                        heard.clear()  # until the next connection confirms it
                try:
                    pubsub.close()
                except Exception as exc:  # noqa: BLE001 - the connection is already gone
                    log.debug("closing the hub's pub/sub failed: %s", exc)
        self._connected = False

    def _resubscribe(self, pubsub: Any, subscribed: set[str]) -> None:
        """Bring the connection's channels in line with the watched ones."""
        with self._lock:
            self._changed = False
            watched = set(self._subscriptions)
            # Watched again before the connection left it: still heard.
            for channel in watched & self._confirmed:
                self._heard[channel].set()
        if new := watched - subscribed:
            pubsub.subscribe(*new)
            subscribed |= new
        if gone := subscribed - watched:
            pubsub.unsubscribe(*gone)
            subscribed -= gone
            self._confirmed -= gone

    def _handle(self, raw: dict[str, Any]) -> None:
        kind = raw.get("type")
        if kind == "message":
            channel = _text(raw["channel"])
            if channel not in self._subscriptions:
                return  # its last stream left while the message was on its way
            message = decode(channel, raw["data"])
            if message is None:
                return
            self._deliver(message)
        elif kind == "subscribe":
            channel = _text(raw.get("channel"))
            if channel == self.channel:
                # Confirmed (again, after redis-py reconnected by itself and
                # resubscribed): anything published while we were away is lost, so
                # everyone catches up.
                if not self._connected:
                    log.info("event hub connected to Redis")
                self._connected = True
                self._first_attempt.set()
                self._broadcast(RESYNC)
            else:
                self._confirmed.add(channel)
                with self._lock:
                    heard = self._heard.get(channel)
                if heard is not None:
                    heard.set()

    def _deliver(self, message: Message) -> None:
        with self._lock:
            subscribers = list(self._subscriptions.get(message.channel, ()))
        for subscription in subscribers:
            subscription.deliver(message)

    def _broadcast(self, signal: Signal) -> None:
        with self._lock:
            everyone = [s for subs in self._subscriptions.values() for s in subs]
        for subscription in everyone:
            subscription.put(signal)

    # --- the status check --------------------------------------------------------------

    def _check(self, read_ended: EndedReader, every_s: float) -> None:
        while not self._closing.wait(every_s):
            watched = self._watched_agents()
            if not watched:
                continue
            try:
                ended = read_ended(watched)
            except Exception as exc:  # noqa: BLE001 - the database is away; try next time
                log.warning("the stream status check could not read the database: %s", exc)
                continue
            for agent_id, status in ended.items():
                data = {"agent_id": str(agent_id), "status": status}
                self._deliver(Message(AGENT_CHANNEL.format(agent_id), "status", data))

    def _watched_agents(self) -> list[uuid.UUID]:
        with self._lock:
            channels = [c for c in self._subscriptions if c.startswith(AGENT_PREFIX)]
        watched = []
        for channel in channels:
            try:
                watched.append(uuid.UUID(channel.removeprefix(AGENT_PREFIX)))
            except ValueError:
                continue  # not an agent id: nobody publishes there
        return watched


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
