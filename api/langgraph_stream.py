"""`runs.stream` and `runs.join_stream` (README, LangGraph SDK): a run's events over SSE.

The frames are `jarvis_agents.langgraph.stream`'s; this module is the Flask response
around them, as api/a2a_stream.py is for A2A: the caller's stream slot, keepalives, a
revoked key or a client that hung up. The response's `Location` is the run's join
stream with the modes asked for: the SDK reconnects there with `Last-Event-ID` when the
connection drops, and gets every step once. A stream that drops leaves its run running.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlencode

from flask import Response, request

from api import params
from api.auth import current_user
from api.context import ApiContext, ctx
from api.langgraph import body as json_body
from api.langgraph import bp, lg, run_path, run_uuid
from api.sse import KEEPALIVE, EventStreamResponse
from api.streaming import SSE_HEADERS, Hangup, Held, opening_stream
from jarvis_agents.errors import RequestError
from jarvis_agents.events import IDLE, Ended, Follower, StepEvent, TokenEvent, Waiting
from jarvis_agents.langgraph import LangGraph, RunView
from jarvis_agents.langgraph.requests import run_request, stream_modes
from jarvis_agents.langgraph.stream import Frame, RunEvents, metadata_frame


@bp.post("/threads/<raw_id>/runs/stream")
def stream_run(raw_id: str) -> Response:
    return _create_and_stream(params.thread_id(raw_id))


@bp.post("/runs/stream")
def stream_stateless_run() -> Response:
    return _create_and_stream(None)


def _create_and_stream(thread_id: uuid.UUID | None) -> Response:
    run = run_request(json_body())
    context = ctx()
    with opening_stream(context) as held:  # before the create: a 429 creates nothing
        view = lg().runs.create(current_user().id, thread_id, run)
        stream = RunStream(context, view, run.stream_modes, held=held, after=0,
                           cancel_on_hangup=run.on_disconnect == "cancel")
    return stream.response()


@bp.get("/threads/<raw_id>/runs/<run_id>/stream")
def join_run_stream(raw_id: str, run_id: str) -> Response:
    view = lg().runs.get(current_user().id, params.thread_id(raw_id), run_uuid(run_id))
    modes = stream_modes(request.args.getlist("stream_mode") or None)
    after = _last_event_id()
    context = ctx()
    with opening_stream(context) as held:
        stream = RunStream(context, view, modes, held=held, after=after)
    return stream.response()


def _last_event_id() -> int:
    raw = (request.headers.get("Last-Event-ID") or "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise RequestError(f"Last-Event-ID must be a step's seq, not {raw[:40]!r}",
                           code="invalid_last_event_id")
    return int(raw)


def frame(told: Frame) -> bytes:
    head = f"id: {told.id}\n" if told.id is not None else ""
    return f"{head}event: {told.event}\ndata: {json.dumps(told.data, ensure_ascii=False)}\n\n".encode()


def frames(told: list[Frame]) -> bytes:
    return b"".join(frame(f) for f in told)


class RunStream:
    """One client's stream of one run."""

    def __init__(self, context: ApiContext, view: RunView, modes: tuple[str, ...], *,
                 held: Held, after: int, cancel_on_hangup: bool = False) -> None:
        self.context = context
        self.cancel_on_hangup = cancel_on_hangup
        self.finished = False  # `end` has been sent
        self.held = held
        self.view = view
        self.modes = modes
        self.after = after
        self.user_id = current_user().id
        self.lg: LangGraph = lg()  # the body is sent outside the request's app context
        self.hangup = Hangup(request.environ)
        self.location = f"{run_path(view)}/stream?{urlencode([('stream_mode', m) for m in modes])}"

    def response(self) -> Response:
        headers = {**SSE_HEADERS, "Location": self.location,
                   "Content-Location": self.location.split("/stream?")[0]}
        response = EventStreamResponse(self._events(), status=200,
                                       content_type="text/event-stream", headers=headers)
        response.call_on_close(self.close)
        return response

    def close(self) -> None:
        """When the response ends, however it ends: with `on_disconnect` "cancel", a
        client that left before the end cancels the run."""
        self.held.release()
        if (not self.cancel_on_hangup or self.finished or self.context.shutting_down
                or self.held.key.revoked):
            return
        with contextlib.suppress(RequestError):  # it ended meanwhile
            self.lg.runs.cancel(self.user_id, self.view.thread_id, self.view.run_id)

    def _wanted(self) -> bool:
        return self.held.key.valid() and not self.hangup() and not self.context.shutting_down

    def _events(self) -> Iterator[bytes]:
        tick_s = self.context.timing.tick_s
        if not self.after:
            yield frame(metadata_frame(self.view))
        else:
            yield KEEPALIVE  # the head now: the client knows it is connected
        view = self.lg.agent_of(self.user_id, self.view, still_wanted=self._wanted, tick_s=tick_s)
        if view is None:
            return
        if view.agent is None:  # cancelled before its turn
            self.finished = True
            yield frames([Frame("end", {"run_id": str(view.run_id), "status": view.status})])
            return
        events = RunEvents(view, self.lg.conversation(self.user_id, view, after=self.after),
                           self.modes)
        follower = self.lg.follow(self.user_id, view, subscriber=self.context.hub, tick_s=tick_s,
                                  after=self.after, tokens="messages-tuple" in self.modes)
        yield from self._told(events, follower, view)

    def _told(self, events: RunEvents, follower: Follower, view: RunView) -> Iterator[bytes]:
        keepalive_s = self.context.timing.keepalive_s
        last_write = time.monotonic()
        with follower:
            for told in follower:
                if not self.held.key.valid():
                    return  # revoked or replaced: nothing more for whoever holds it
                if isinstance(told, StepEvent):
                    out = events.step(told.data)
                elif isinstance(told, TokenEvent):
                    out = events.token(told.data)
                elif isinstance(told, Waiting) and told.data.get("agent_ids"):
                    continue  # on the agents it called: the run goes on, nothing to resume
                elif isinstance(told, Waiting | Ended):
                    self.lg.ended(view)
                    agent = self.lg.runs.get(self.user_id, None, view.run_id).agent
                    assert agent is not None
                    end = events.ended(agent)
                    self.finished = True
                    yield frames([*events.waiting(agent), *end] if isinstance(told, Waiting) else end)
                    return
                elif told is IDLE:
                    if self.hangup():
                        return  # the run goes on: join_stream follows it again
                    if time.monotonic() - last_write < keepalive_s:
                        continue
                    out = []
                    yield KEEPALIVE
                else:
                    continue
                if out:
                    yield frames(out)
                last_write = time.monotonic()
