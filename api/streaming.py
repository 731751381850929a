"""Server-sent events (CONTRACT §4): an agent's steps live, and a user's status changes.

An agent stream subscribes to the hub FIRST, then replays the persisted steps after
the client's position, then relays live messages, skipping any seq it already sent.
A seq that jumps ahead, a hub reconnect, or a terminal status makes it read the
database for what it has not sent: a lost publish never loses a step. After the
last step come `cancelled` (if it was) and `done`, and the stream closes.

While live messages flow, a stream reads the database only for those reasons. A
terminal status whose publish was lost is found by the hub's status check — one
query per process every `recheck_s` for all the watched agents, not one per
stream. While the hub has no Redis connection, each stream polls the record.

While a stream waits for live messages, the hub may write the next steps to its
socket itself (`api.sse.SocketWriter`): one event reaches a thousand streams of a
hot agent without waking a thousand greenlets.
"""

from __future__ import annotations

import logging
import random
import select
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flask import Blueprint, Response, request

from api import params
from api.agents import agent_location, is_terminal_status
from api.auth import current_user
from api.context import ApiContext, ctx
from api.hub import CLOSED, RESYNC, Subscription, ended_agents
from api.sse import KEEPALIVE, EventStreamResponse, socket_writer, sse, step_frame
from api.stream_slots import Slot
from jarvis_agents.errors import RequestError
from jarvis_agents.events import (
    AGENT_CHANNEL,
    USER_CHANNEL,
    Message,
    step_event,
    waiting_event,
)
from jarvis_agents.lifecycle import Agent, AgentStatus, Step

log = logging.getLogger(__name__)

bp = Blueprint("streaming", __name__, url_prefix="/api/v1")

STATUS_FIELDS = ("agent_id", "status", "stop_reason", "step_count", "updated_at")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
POLL_S = 1.0  # how often a stream reads the record while the hub has no Redis


@bp.post("/agents/stream")
def create_and_stream() -> Response:
    """Create and enqueue exactly like POST /agents, then stream; hanging up cancels."""
    request_, key = params.create_request()
    context = ctx()
    user_id = current_user().id
    with opening_stream(context) as slot:  # before the create: a 429 creates nothing
        agent, _ = context.service.create(user_id, request_, idempotency_key=key)
        stream = AgentStream(context, user_id, agent.id, after=0, cancel_on_hangup=True, slot=slot)
    response = stream.response()
    response.headers["Location"] = agent_location(agent.id)
    return response


@bp.get("/agents/<agent_id:raw_id>/events")
def agent_events(raw_id: str) -> Response:
    """Join an agent's stream: replay after Last-Event-ID or ?after=, then live."""
    agent_id = params.agent_id(raw_id)
    after = params.resume_after()
    context = ctx()
    with opening_stream(context) as slot:
        stream = AgentStream(
            context, current_user().id, agent_id, after=after, cancel_on_hangup=False, slot=slot
        )
    return stream.response()


@bp.get("/events")
def user_events() -> Response:
    """Status changes of all the caller's agents, live only."""
    context = ctx()
    with opening_stream(context) as slot:
        subscription = context.hub.subscribe(USER_CHANNEL.format(current_user().id))

    def close() -> None:
        subscription.close()
        slot.release()

    events = _status_events(context, subscription, Hangup(request.environ))
    return _event_stream(events, on_close=close)


@contextmanager
def opening_stream(context: ApiContext) -> Iterator[Slot]:
    """One of the caller's stream slots (api.stream_slots), given back if the stream
    fails to open; once it is open, the stream gives it back when it ends."""
    slot = context.stream_slots.take(current_user().id)
    try:
        yield slot
    except BaseException:
        slot.release()
        raise


def _poll() -> Any:
    """The real `select.poll` even under gevent's monkey-patching (a zero timeout never blocks)."""
    from gevent.monkey import get_original

    return get_original("select", "poll")()


class Hangup:
    """Whether the client has closed its connection, seen without writing to it.

    A closed TCP connection reads as end-of-file; peeking at the socket between
    events notices it within a tick instead of at the next write (which only fails
    on the second write after the close). Servers that do not expose the socket
    fall back to the writes: keepalives make those frequent enough.
    """

    def __init__(self, environ: dict[str, Any]) -> None:
        self.sock = environ.get("gunicorn.socket")

    def __call__(self) -> bool:
        if self.sock is None:
            return False
        try:
            # poll, not select: select() refuses descriptors >= 1024, which an API
            # process holding a thousand streams reaches (and read that as a hang-up).
            poller = _poll()
            poller.register(self.sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(0):
                return False
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True  # reset, or already closed


def _event_stream(
    body: Iterator[bytes], *, on_close: Callable[[], None]
) -> EventStreamResponse:
    """The streaming response; `on_close` runs when it ends, however it ends."""
    if request.method == "HEAD":
        # Nothing would ever be written, so a hang-up would never be noticed.
        on_close()
        body = iter(())
    # The exact media type of CONTRACT §2 (Flask would append a charset).
    response = EventStreamResponse(
        body, status=200, content_type="text/event-stream", headers=SSE_HEADERS
    )
    response.call_on_close(on_close)
    return response


def _status_events(
    context: ApiContext, subscription: Subscription, hangup: Hangup
) -> Iterator[bytes]:
    yield KEEPALIVE  # sends the headers now: the client knows it is connected
    quiet_since = time.monotonic()
    while True:
        item = subscription.get(context.timing.tick_s)
        if item is CLOSED or item is None and hangup():
            return
        if isinstance(item, Message) and item.kind == "status":
            yield sse("status", {k: item.data.get(k) for k in STATUS_FIELDS})
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= context.timing.keepalive_s:
            yield KEEPALIVE
            quiet_since = time.monotonic()


class AgentStream:
    """One client's view of one agent's events."""

    def __init__(
        self, context: ApiContext, user_id: uuid.UUID, agent_id: uuid.UUID, *, after: int,
        cancel_on_hangup: bool, slot: Slot,
    ) -> None:
        self.context = context
        self.slot = slot
        self.user_id = user_id
        self.agent_id = agent_id
        self.last_seq = after
        self.cancel_on_hangup = cancel_on_hangup
        self.hangup = Hangup(request.environ)
        self.finished = False
        self._response: EventStreamResponse | None = None
        # Subscribe before reading anything, so nothing published from now on is missed;
        # then the first read of the record (a 404 for someone else's agent).
        engine = context.repository.engine
        context.hub.check_ended(
            lambda agent_ids: ended_agents(engine, agent_ids), every_s=context.timing.recheck_s
        )
        self.subscription = context.hub.subscribe(AGENT_CHANNEL.format(agent_id))
        try:
            self.agent = context.service.get(user_id, agent_id)
            self.backlog = context.repository.steps_after(agent_id, after)
        except BaseException:
            self.subscription.close()
            raise

    def response(self) -> Response:
        self._response = _event_stream(self._events(), on_close=self.close)
        return self._response

    def close(self) -> None:
        """Called when the response ends, whether it finished or the client hung up."""
        self.subscription.close()
        self.slot.release()
        if self.finished or not self.cancel_on_hangup or self.context.shutting_down:
            return
        try:
            self.context.service.cancel(self.user_id, self.agent_id)
            log.info("agent %s cancelled: its stream's client hung up", self.agent_id)
        except RequestError:
            pass  # it ended meanwhile (409) — nothing to cancel
        except Exception as exc:  # noqa: BLE001 - a cancel that cannot reach the database
            log.warning("could not cancel agent %s after its client hung up: %s", self.agent_id, exc)

    # --- the event sequence ----------------------------------------------------------

    def _events(self) -> Iterator[bytes]:
        timing = self.context.timing
        # POST /stream also writes often, in case the socket cannot be watched (Hangup).
        keepalive_s = timing.probe_s if self.cancel_on_hangup else timing.keepalive_s
        yield KEEPALIVE
        yield from self._steps(self.backlog)
        self.backlog = []
        yield from self._waiting(self.agent)  # to a client that joins while it waits
        if self.agent.is_terminal:
            yield from self._finish()
            return
        last_write = time.monotonic()
        next_poll = last_write + POLL_S
        # The head is sent by now: while this waits, the hub may write the next
        # steps to the socket itself (api.sse.SocketWriter); None where it cannot.
        writer = socket_writer(self._response)
        self._response = None  # it holds this generator: no cycle left for the GC
        # Streams opened together would wake together on every tick, a thousand
        # hang-up checks in one burst that holds up an event arriving meanwhile; a
        # random first wait spreads their ticks out.
        wait_s = random.uniform(0, timing.tick_s)
        while True:
            if writer is not None:
                writer.last_seq = self.last_seq
            item = self.subscription.get(wait_s, writer=writer)
            wait_s = timing.tick_s
            if writer is not None:
                self.last_seq = writer.last_seq  # what the hub wrote meanwhile
                last_write = max(last_write, writer.wrote_at)
                if writer.unsent and not writer.flush():
                    return  # the client left
            now = time.monotonic()
            if item is CLOSED:
                return  # the server is stopping; the client reconnects with Last-Event-ID
            if item is None and self.hangup():
                return  # the client left: close() cancels the agent of a POST /stream
            chunk: list[bytes] = []
            terminal = False
            if isinstance(item, Message):
                if item.kind == "step":
                    chunk = self._relay(item)
                elif is_terminal_status(item):
                    terminal = True
                elif item.kind == "status" and item.data.get("status") == AgentStatus.WAITING.value:
                    agent = self._read(lambda: self.context.repository.get(self.agent_id))
                    chunk = [*self._steps(self._read(self._steps_after) or []),
                             *self._waiting(agent)]
            elif item is RESYNC or (now >= next_poll and not self.context.hub.connected):
                # Messages were missed, or none can arrive: the record has everything.
                # (While they flow, a lost step shows up as a gap in seq, and the hub's
                # status check stands in for a lost terminal status.)
                chunk, terminal = self._catch_up()
                next_poll = now + POLL_S
            if terminal:
                yield from chunk
                yield from self._finish()
                return
            if chunk:
                yield b"".join(chunk)
                last_write = now
            elif now - last_write >= keepalive_s:
                yield KEEPALIVE
                last_write = now

    def _relay(self, message: Message) -> list[bytes]:
        step = step_frame(message)
        if step is None:
            return []
        seq = step.seq
        if seq <= self.last_seq:
            return []  # already sent (replayed from the database, or a duplicate)
        if seq > self.last_seq + 1:
            # A gap: some publish was lost. The database has everything up to `seq`.
            return list(self._steps(self._read(self._steps_after) or []))
        self.last_seq = seq
        return [step.frame]

    def _catch_up(self) -> tuple[list[bytes], bool]:
        """The steps not sent yet, and whether the agent has ended."""
        agent = self._read(lambda: self.context.repository.get(self.agent_id))
        if agent is not None and agent.is_terminal:
            return [], True  # _finish() reads the steps
        return list(self._steps(self._read(self._steps_after) or [])), False

    def _finish(self) -> Iterator[bytes]:
        # Re-read after the terminal status: a step's publish may have been lost.
        yield from self._steps(self._steps_after())
        agent = self.context.repository.get(self.agent_id) or self.agent
        summary = {
            "agent_id": str(self.agent_id),
            "status": agent.status.value,
            "stop_reason": agent.stop_reason.value if agent.stop_reason else None,
        }
        if agent.status is AgentStatus.CANCELLED:
            yield sse("cancelled", summary)
        self.finished = True
        yield sse("done", summary)

    def _waiting(self, agent: Agent | None) -> Iterator[bytes]:
        """The `waiting` event (CONTRACT §4) if the agent waits for an approval."""
        if agent is not None and agent.status is AgentStatus.WAITING and agent.waiting_for:
            yield sse("waiting", waiting_event(agent))

    def _steps(self, steps: list[Step]) -> Iterator[bytes]:
        for step in steps:
            if step.seq > self.last_seq:
                self.last_seq = step.seq
                yield sse(step.type.value.lower(), step_event(self.agent_id, step), event_id=step.seq)

    def _steps_after(self) -> list[Step]:
        return self.context.repository.steps_after(self.agent_id, self.last_seq)

    def _read(self, read: Any) -> Any:
        """A database read that may fail mid-stream: log it and try again later."""
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - the next check tries again
            log.warning("stream of agent %s could not read the database: %s", self.agent_id, exc)
            return None

