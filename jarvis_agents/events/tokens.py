"""Live tokens (docs/api.md §6): a reply's text as the model writes it, to whoever listens.

Nothing about tokens is persisted. The worker hands each piece of a reply's text to
a `ReplyTokens` (the model's `on_delta`); the pieces are batched — sent every
`interval_s` or once `max_bytes` have gathered, whichever comes first — and published
on the agent's channel as `token` messages, between the bus's other messages in
order, so that a reply's tokens come before its step events.

They are published only for agents the worker knows someone listens to. An API
stream with `?tokens=1` registers as a listener (`TokenListeners`: a Redis hash per
agent, one field per API process, expiring unless refreshed while its streams are
open) and announces it to the workers on the control channel, again at every refresh.
A worker keeps the announcements it heard (`RedisEventBus.listener_heard`) as long as
a registration lives; its `TokenBatcher` asks them (`listening`, in memory), and
each batch of an announced agent goes out as a script that publishes it only if the
hash still exists then, in the same write as the steps' publishes. A reply of an
agent nobody announced costs a list of its pieces, dropped at its end: no thread
woken, no Redis command. An announcement heard while a reply is being written sends
what the reply wrote so far, then the rest: a client that joins mid-reply gets the
reply from its start. One heard after a reply ended is too late for it (the
announcement travels in about a millisecond; a model writes a reply in seconds).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Final, Protocol, Self

from jarvis_agents.events.messages import CONTROL_CHANNEL, encode

log = logging.getLogger(__name__)

TOKEN_LISTENERS: Final = "jarvis:tokens:{}"  # a hash: one field per API process listening
LISTENER_TTL_S: Final = 10.0  # a listener's registration lapses unless refreshed
REFRESH_S: Final = 3.0
# While replies keep coming, the sender looks every interval instead of being woken.
LINGER_S: Final = 1.0

# A published batch: (agent id, step, text).
TokenBatch = tuple[uuid.UUID, int, str]
Publish = Callable[[Sequence[TokenBatch]], None]
Listening = Callable[[Sequence[uuid.UUID]], set[uuid.UUID]]


def token_event(agent_id: uuid.UUID, step: int, delta: str) -> dict[str, Any]:
    """The data of a `token` event (docs/api.md §6)."""
    return {"agent_id": str(agent_id), "step": step, "delta": delta}


class Listen(Protocol):
    """One stream's registration as a token listener; close it when the stream ends."""

    def close(self) -> None: ...


class ReplyTokens:
    """One reply's token stream: call it with each piece of text (the `on_delta`).

    Use it as a context manager around the model call: leaving the block normally
    sends what is left (before the caller publishes the reply's steps); leaving on an
    error drops it.
    """

    def __init__(self, batcher: TokenBatcher, agent_id: uuid.UUID, step: int) -> None:
        self.batcher = batcher
        self.agent_id = agent_id
        self.step = step
        self._pieces: list[str] = []
        self.size = 0  # characters waiting
        self.since = 0.0  # time.monotonic() of the oldest piece waiting
        self._buffer = threading.Lock()  # held briefly: appends never wait for Redis
        self.sending = threading.Lock()  # held across a batch's check and publish: order
        self.listened = False  # someone listens: the sender thread sends its batches

    def __call__(self, text: str) -> None:
        if not text:
            return
        with self._buffer:
            first = not self._pieces
            self._pieces.append(text)
            self.size += len(text)
            if first:
                self.since = time.monotonic()
            full = self.size >= self.batcher.max_bytes
            filled = full and self.size - len(text) < self.batcher.max_bytes  # just now
        if self.listened:
            if first or full:
                self.batcher.due(self, now=full)
            return
        # Nobody heard listening yet: asked when the reply starts and when it fills, not
        # at every piece after (an announcement heard later wakes it: TokenBatcher.wake).
        if (first or filled) and self.batcher.heard(self.agent_id):
            self.batcher.due(self, now=full)

    @property
    def waiting(self) -> bool:
        return bool(self._pieces)

    def take(self) -> str:
        with self._buffer:
            text = "".join(self._pieces)
            self._pieces.clear()
            self.size = 0
        return text

    def __enter__(self) -> Self:
        self.batcher.opened(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self.batcher.send_rest(self)
        finally:
            self.batcher.closed(self)


class TokenBatcher:
    """Batches the token streams of one process's replies; one thread sends them."""

    def __init__(
        self, *, publish: Publish, listening: Listening, interval_s: float = 0.05,
        max_bytes: int = 256, publish_rest: Publish | None = None,
    ) -> None:
        self.publish = publish
        # A complete reply's last batch, on the caller's thread (default: `publish`).
        self.publish_rest = publish_rest or publish
        self.listening = listening
        self.interval_s = interval_s
        self.max_bytes = max_bytes
        self.pid = os.getpid()
        self._open: set[ReplyTokens] = set()
        self._changed = threading.Condition(threading.Lock())
        self._urgent = False
        self._thread: threading.Thread | None = None
        # Whether the sender thread sleeps with no batch due (until notified), or with a
        # deadline, which comes no later than any newer reply's: then it need not be woken.
        # It sleeps so only once no text came for LINGER_S: until then it looks every
        # interval, so that a reply's first text, nearly always, wakes nobody (a thread
        # woken on every reply's first text took the GIL from the reply's own thread).
        self._idle = True
        self._last_due = -math.inf  # time.monotonic() of the last text that came

    def reply(self, agent_id: uuid.UUID, step: int) -> ReplyTokens:
        return ReplyTokens(self, agent_id, step)

    def opened(self, reply: ReplyTokens) -> None:
        with self._changed:
            self._open.add(reply)

    def closed(self, reply: ReplyTokens) -> None:
        with self._changed:
            self._open.discard(reply)

    def heard(self, agent_id: uuid.UUID) -> bool:
        """Whether someone listens to the agent's tokens, as far as this process knows."""
        return agent_id in self.listening([agent_id])

    def wake(self, agent_id: uuid.UUID) -> None:
        """Someone now listens to the agent: its open replies send what they hold."""
        with self._changed:
            replies = [reply for reply in self._open if reply.agent_id == agent_id]
        for reply in replies:
            if reply.waiting:
                self.due(reply, now=True)

    def due(self, reply: ReplyTokens, *, now: bool) -> None:
        """A reply someone listens to has text waiting (`now`: enough to send at once):
        wake the sender, which sends its batches from now on."""
        with self._changed:
            reply.listened = True
            self._last_due = time.monotonic()
            self._urgent = self._urgent or now
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jarvis-tokens", daemon=True)
                self._thread.start()
            # A thread switch per reply saved: a sleeper with a deadline looks again then.
            if now or self._idle:
                self._changed.notify()

    def send_rest(self, reply: ReplyTokens) -> None:
        """The reply is complete: send what it still holds, on the caller's thread."""
        with reply.sending:
            if not reply.waiting:
                return
            text = reply.take()
            if text and self.heard(reply.agent_id):
                self.publish_rest([(reply.agent_id, reply.step, text)])

    # --- the sender thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._changed:
                wait_s = self._next_wait()
                while wait_s is None or (wait_s > 0 and not self._urgent):
                    if wait_s is None and time.monotonic() - self._last_due < LINGER_S:
                        wait_s = self.interval_s  # replies keep coming: look again then
                    else:
                        self._idle = wait_s is None
                    self._changed.wait(wait_s)
                    self._idle = False
                    wait_s = self._next_wait()
                self._urgent = False
                replies = list(self._open)
            if not self._send(replies):
                time.sleep(0.001)  # a due reply is sending its last batch itself

    def _next_wait(self) -> float | None:
        """Seconds until the oldest waiting batch is due; None when none waits."""
        oldest = min((r.since for r in self._open if r.listened and r.waiting), default=None)
        if oldest is None:
            return None
        return max(0.0, oldest + self.interval_s - time.monotonic())

    def _send(self, replies: Iterable[ReplyTokens]) -> bool:
        """Send the batches that are due; False if one was busy and nothing was sent."""
        now = time.monotonic()
        held = []
        try:
            for reply in replies:
                if not (reply.listened and reply.waiting):
                    continue  # nobody listens (yet): its text stays with it
                if now - reply.since < self.interval_s and reply.size < self.max_bytes:
                    continue
                if reply.sending.acquire(blocking=False):  # else its last batch is going out
                    held.append(reply)
            if not held:
                return False
            heard = self.listening(list({r.agent_id for r in held}))
            batches = [(r.agent_id, r.step, r.take()) for r in held]
            self._publish([b for b in batches if b[0] in heard and b[2]])
        except Exception as exc:  # noqa: BLE001 - tokens are best effort; the steps are not
            log.warning("could not send live tokens: %s", exc)
        finally:
            for reply in held:
                reply.sending.release()
        return True

    def _publish(self, batches: Sequence[TokenBatch]) -> None:
        if batches:
            self.publish(batches)


class TokenListeners:
    """An API process's token listeners, registered in Redis (see the module's docstring).

    The first stream of an agent adds this process's field to the agent's hash, the
    last one removes it; meanwhile a thread renews the hash's expiry every REFRESH_S,
    so a process that dies without a goodbye stops counting within LISTENER_TTL_S.
    """

    def __init__(self, redis_client: Any, *, ttl_s: float = LISTENER_TTL_S,
                 refresh_s: float = REFRESH_S) -> None:
        self.redis = redis_client
        self.ttl_s = ttl_s
        self.refresh_s = refresh_s
        self.field = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._counts: dict[uuid.UUID, int] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    def listen(self, agent_id: uuid.UUID) -> Listen:
        with self._lock:
            count = self._counts.get(agent_id, 0)
            self._counts[agent_id] = count + 1
        if count == 0:
            self._register(agent_id)
        self._start()
        return Registration(self.leave, agent_id)

    def count(self, agent_id: uuid.UUID) -> int:
        with self._lock:
            return self._counts.get(agent_id, 0)

    def leave(self, agent_id: uuid.UUID) -> None:
        with self._lock:
            count = self._counts.get(agent_id, 0) - 1
            if count > 0:
                self._counts[agent_id] = count
                return
            self._counts.pop(agent_id, None)
        with contextlib.suppress(Exception):  # it lapses by itself
            self.redis.hdel(TOKEN_LISTENERS.format(agent_id), self.field)

    def close(self) -> None:
        self._closing.set()

    def _register(self, agent_id: uuid.UUID) -> None:
        try:
            pipe = self.redis.pipeline(transaction=False)
            self._registration(pipe, agent_id)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - no tokens until the next refresh
            log.warning("could not register a token listener of agent %s: %s", agent_id, exc)

    def _registration(self, pipe: Any, agent_id: uuid.UUID) -> None:
        """This process's field in the agent's hash, its expiry, and the announcement
        that tells the workers (a worker that started since hears the next refresh's)."""
        key = TOKEN_LISTENERS.format(agent_id)
        pipe.hset(key, self.field, "1")
        pipe.expire(key, int(self.ttl_s))
        pipe.publish(CONTROL_CHANNEL, encode("tokens", {"agent_id": str(agent_id)}))

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._refresh, daemon=True,
                                                    name="jarvis-token-listeners")
                    self._thread.start()

    def _refresh(self) -> None:
        while not self._closing.wait(self.refresh_s):
            with self._lock:
                agents = list(self._counts)
            if not agents:
                continue
            try:
                pipe = self.redis.pipeline(transaction=False)
                for agent_id in agents:
                    self._registration(pipe, agent_id)
                pipe.execute()
            except Exception as exc:  # noqa: BLE001 - Redis away; try again next time
                log.warning("could not renew %s token listeners: %s", len(agents), exc)


class Registration:
    """One stream's token listening: `close()` calls `leave(agent_id)`, once."""

    def __init__(self, leave: Callable[[uuid.UUID], None], agent_id: uuid.UUID) -> None:
        self._leave: Callable[[uuid.UUID], None] | None = leave
        self.agent_id = agent_id

    def close(self) -> None:
        leave, self._leave = self._leave, None
        if leave is not None:
            leave(self.agent_id)
