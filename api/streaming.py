"""Server-sent events (docs/api.md §4): an agent's steps live, and a user's status changes.

What an agent's stream tells, and in what order, is `jarvis_agents.events.follow`'s
business (subscribe first, replay, relay live, repair gaps, end). This module is
the Flask response around it: the caller's stream slot, SSE framing (`api.sse`),
keepalives, noticing a client that hung up (and, for POST /agents/stream, cancelling
its agent).

While a stream waits for live messages, the hub may write the next steps to its
socket itself (`api.sse.SocketWriter`): one event reaches a thousand streams of a
hot agent without waking a thousand greenlets.
"""

from __future__ import annotations

import logging
import select
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, request

from api import params
from api.agents import agent_location
from api.auth import current_api_key, current_user
from api.context import ApiContext, ctx
from api.sse import (
    KEEPALIVE,
    EventStreamResponse,
    SocketWriter,
    ended_frames,
    socket_writer,
    sse,
    step_event_frame,
    token_frame,
)
from api.stream_slots import Slot
from jarvis_agents.accounts import KeyWatch
from jarvis_agents.errors import RequestError
from jarvis_agents.events import (
    CLOSED,
    IDLE,
    USER_CHANNEL,
    Ended,
    Listen,
    Message,
    StepEvent,
    Subscription,
    TokenEvent,
    Waiting,
)
from jarvis_agents.lifecycle import Agent

log = logging.getLogger(__name__)

bp = Blueprint("streaming", __name__, url_prefix="/api/v1")

STATUS_FIELDS = ("agent_id", "status", "stop_reason", "step_count", "updated_at")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@bp.post("/agents/stream")
def create_and_stream() -> Response:
    """Create and enqueue exactly like POST /agents, then stream; hanging up cancels."""
    request_, key = params.create_request()
    tokens = params.query_tokens()
    context = ctx()
    user_id = current_user().id
    early: list[Listen] = []

    def listen_before_it_starts(agent: Agent) -> None:
        # Announced to the workers before the agent is enqueued: they publish its first
        # reply's tokens whatever its speed. The stream's own registration follows.
        early.append(context.hub.listen_tokens(agent.id))

    with opening_stream(context) as held:  # before the create: a 429 creates nothing
        try:
            agent, _ = context.service.create(
                user_id, request_, idempotency_key=key, traceparent=params.traceparent(),
                before_enqueue=listen_before_it_starts if tokens else None)
            stream = AgentStream(context, user_id, agent.id, after=0, cancel_on_hangup=True,
                                 held=held, tokens=tokens)
        finally:
            for registration in early:
                registration.close()
    response = stream.response()
    response.headers["Location"] = agent_location(agent.id)
    return response


@bp.get("/agents/<agent_id:raw_id>/events")
def agent_events(raw_id: str) -> Response:
    """Join an agent's stream: replay after Last-Event-ID or ?after=, then live."""
    agent_id = params.agent_id(raw_id)
    after = params.resume_after()
    tokens = params.query_tokens()
    context = ctx()
    with opening_stream(context) as held:
        stream = AgentStream(
            context, current_user().id, agent_id, after=after, cancel_on_hangup=False, held=held,
            tokens=tokens,
        )
    return stream.response()


@bp.get("/events")
def user_events() -> Response:
    """Status changes of all the caller's agents, live only."""
    context = ctx()
    with opening_stream(context) as held:
        subscription = context.hub.subscribe(USER_CHANNEL.format(current_user().id))

    def close() -> None:
        subscription.close()
        held.release()

    events = _status_events(context, subscription, Hangup(request.environ), held.key)
    return _event_stream(events, on_close=close)


@dataclass(frozen=True)
class Held:
    """What an open stream holds until it ends: one of its user's slots
    (api.stream_slots), and the watch on the key it was opened with, which ends it
    once the key is revoked or replaced (jarvis_agents/accounts.py)."""

    slot: Slot
    key: KeyWatch

    def release(self) -> None:
        self.slot.release()
        self.key.close()


@contextmanager
def opening_stream(context: ApiContext) -> Iterator[Held]:
    """What a stream holds, given back if the stream fails to open; once it is open,
    the stream gives it back when it ends."""
    slot = context.stream_slots.take(current_user().id)
    held = Held(slot, context.keys.watch(current_api_key()))
    try:
        yield held
    except BaseException:
        held.release()
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
    # The exact media type of docs/api.md §2 (Flask would append a charset).
    response = EventStreamResponse(
        body, status=200, content_type="text/event-stream", headers=SSE_HEADERS
    )
    response.call_on_close(on_close)
    return response


def _status_events(
    context: ApiContext, subscription: Subscription, hangup: Hangup, key: KeyWatch
) -> Iterator[bytes]:
    yield KEEPALIVE  # sends the headers now: the client knows it is connected
    quiet_since = time.monotonic()
    while True:
        item = subscription.get(context.timing.tick_s)
        if item is CLOSED or item is None and hangup() or not key.valid():
            return
        if isinstance(item, Message) and item.kind == "status":
            yield sse("status", {k: item.data.get(k) for k in STATUS_FIELDS})
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= context.timing.keepalive_s:
            yield KEEPALIVE
            quiet_since = time.monotonic()


class AgentStream:
    """One client's view of one agent's events (`follow`'s), as an SSE response."""

    def __init__(
        self, context: ApiContext, user_id: uuid.UUID, agent_id: uuid.UUID, *, after: int,
        cancel_on_hangup: bool, held: Held, tokens: bool = False,
    ) -> None:
        self.context = context
        self.held = held
        self.user_id = user_id
        self.agent_id = agent_id
        self.cancel_on_hangup = cancel_on_hangup
        self.tokens = tokens
        self.hangup = Hangup(request.environ)
        self._response: EventStreamResponse | None = None
        self._writer: SocketWriter | None = None
        # Subscribes, then reads the agent (a 404 for someone else's) and its backlog.
        self.follower = context.service.follow(
            user_id, agent_id, subscriber=context.hub, after=after, tick_s=context.timing.tick_s,
            writer=self._lend_writer, tokens=tokens,
        )

    def response(self) -> Response:
        self._response = _event_stream(self._events(), on_close=self.close)
        return self._response

    def close(self) -> None:
        """Called when the response ends, whether it finished or the client hung up."""
        self.follower.close()
        self.held.release()
        if self._writer is not None:
            self._writer = None
            self.context.direct_streams.closed()
        # Ended by the server (stopping, or the key revoked): the client did not hang up.
        if (self.follower.finished or not self.cancel_on_hangup or self.context.shutting_down
                or self.held.key.revoked):
            return
        try:
            self.context.service.cancel(self.user_id, self.agent_id)
            log.info("agent %s cancelled: its stream's client hung up", self.agent_id)
        except RequestError:
            pass  # it ended meanwhile (409) — nothing to cancel
        except Exception as exc:  # noqa: BLE001 - a cancel that cannot reach the database
            log.warning("could not cancel agent %s after its client hung up: %s", self.agent_id, exc)

    def _lend_writer(self) -> SocketWriter | None:
        """Asked by the follower once the replay is told: the head is sent by now, so the
        hub may write the next steps to the socket itself; None where it cannot."""
        self._writer = socket_writer(self._response, server_chunks=self.context.server_chunks,
                                     tokens=self.tokens)
        self._response = None  # it holds this generator: no cycle left for the GC
        if self._writer is not None:
            self.context.direct_streams.opened()
        return self._writer

    def _events(self) -> Iterator[bytes]:
        timing = self.context.timing
        # POST /stream also writes often, in case the socket cannot be watched (Hangup).
        keepalive_s = timing.probe_s if self.cancel_on_hangup else timing.keepalive_s
        yield KEEPALIVE
        last_write = time.monotonic()
        key = self.held.key
        for told in self.follower:
            if not key.valid():
                return  # revoked or replaced: nothing more for whoever holds it
            writer = self._writer
            if writer is not None:
                last_write = max(last_write, writer.wrote_at)
                if writer.unsent and not writer.flush():
                    return  # the client left
            if isinstance(told, StepEvent):
                yield step_event_frame(told)
                last_write = time.monotonic()
            elif isinstance(told, TokenEvent):
                if writer is not None and writer.sent_in_part is told.message:
                    writer.sent_in_part = None  # its rest went out with flush() above
                    continue
                yield token_frame(told.message).frame
                last_write = time.monotonic()
            elif isinstance(told, Waiting):
                yield sse("waiting", told.data)
                last_write = time.monotonic()
            elif isinstance(told, Ended):
                yield ended_frames(told)
                return
            elif told is IDLE:
                if self.hangup():
                    return  # the client left: close() cancels the agent of a POST /stream
                now = time.monotonic()
                if now - last_write >= keepalive_s:
                    yield KEEPALIVE
                    last_write = now
