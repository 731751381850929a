"""SendStreamingMessage and SubscribeToTask (README, A2A): a task's events over SSE.

Each event is a JSON-RPC response whose result is a StreamResponse: first the Task as it
is, then a WORKING status update per step (each carries `id:` = the step's seq), an
INPUT_REQUIRED status update while the agent waits for an approval (the stream stays
open), and at the end the artifact and the final status. What to tell comes from
`jarvis_agents.events.follow`, as for the agents' own SSE streams (api/streaming.py).

A stream that drops leaves its task running: SubscribeToTask joins it again, from the
`Last-Event-ID` it last saw (or from the start).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from a2a.types.a2a_pb2 import SendMessageRequest, StreamResponse, SubscribeToTaskRequest
from a2a.utils.errors import UnsupportedOperationError
from flask import Response, request
from google.protobuf.json_format import MessageToDict
from jsonrpc.jsonrpc2 import JSONRPC20Response

from api import params as api_params
from api.a2a_rpc import VERSION, RequestId, tasks
from api.auth import current_user
from api.context import ApiContext, ctx
from api.sse import KEEPALIVE, EventStreamResponse
from api.streaming import SSE_HEADERS, Hangup, Held, opening_stream
from jarvis_agents.a2a.tasks import ended_events, status_event, step_event, task_event
from jarvis_agents.events import IDLE, Ended, StepEvent, Waiting
from jarvis_agents.lifecycle import Agent


def send_streaming_message(request_id: RequestId, params: SendMessageRequest) -> Response:
    user_id = current_user().id
    context = ctx()
    with opening_stream(context) as held:  # before the create: a 429 creates nothing
        agent = tasks().send(user_id, params)
        # A message that answers a task goes on from the steps it has already told.
        after = _last_seq(agent) if params.message.task_id else 0
        stream = TaskStream(context, user_id, agent, request_id, held=held, after=after)
    return stream.response()


def subscribe_to_task(request_id: RequestId, params: SubscribeToTaskRequest) -> Response:
    user_id = current_user().id
    agent = tasks().agent(user_id, params.id)
    if agent.is_terminal:
        raise UnsupportedOperationError(
            f"task {agent.id} has ended ({agent.status.value}); GetTask reads it")
    after = api_params.resume_after()
    context = ctx()
    with opening_stream(context) as held:
        stream = TaskStream(context, user_id, agent, request_id, held=held, after=after)
    return stream.response()


def _last_seq(agent: Agent) -> int:
    steps = tasks().agents.repository.steps_after(agent.id)
    return steps[-1].seq if steps else 0


def frame(request_id: RequestId, event: StreamResponse, *, event_id: int | None = None) -> bytes:
    data = JSONRPC20Response(result=MessageToDict(event), _id=request_id).data
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class TaskStream:
    """One client's stream of one task."""

    def __init__(self, context: ApiContext, user_id: uuid.UUID, agent: Agent,
                 request_id: RequestId, *, held: Held, after: int) -> None:
        self.context = context
        self.held = held
        self.agent = agent
        self.request_id = request_id
        self.user_id = user_id
        self.tasks = tasks()  # the body is sent outside the request's app context
        self.hangup = Hangup(request.environ)
        # Subscribes, then reads the agent and the steps after `after`.
        self.follower = self.tasks.follow(user_id, agent, subscriber=context.hub,
                                       tick_s=context.timing.tick_s, after=after)

    def response(self) -> Response:
        response = EventStreamResponse(self._events(), status=200, content_type="text/event-stream",
                                       headers={**SSE_HEADERS, "A2A-Version": VERSION})
        response.call_on_close(self.close)
        return response

    def close(self) -> None:
        self.follower.close()
        self.held.release()

    def _events(self) -> Iterator[bytes]:
        keepalive_s = self.context.timing.keepalive_s
        yield frame(self.request_id, task_event(self.tasks.task(self.follower.agent)))
        last_write = time.monotonic()
        for told in self.follower:
            if not self.held.key.valid():
                return  # revoked or replaced: nothing more for whoever holds it
            if isinstance(told, StepEvent):
                yield frame(self.request_id, step_event(self.agent, told.data), event_id=told.seq)
            elif isinstance(told, Waiting) and not told.data.get("agent_ids"):
                yield frame(self.request_id, status_event(self._read()))
            elif isinstance(told, Ended):
                agent = self._read()
                yield b"".join(frame(self.request_id, event) for event in ended_events(agent))
                return
            elif told is IDLE:
                if self.hangup():
                    return  # the task goes on: SubscribeToTask joins it again
                if time.monotonic() - last_write >= keepalive_s:
                    yield KEEPALIVE
                else:
                    continue
            last_write = time.monotonic()

    def _read(self) -> Any:
        return self.tasks.agent(self.user_id, str(self.agent.id))
