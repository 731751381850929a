"""The calls a remote delegate's wait makes (README, Agents that call agents), with the
official `a2a-sdk` client: `SendMessage` (returning at once), `GetTask` for many open
calls in one go, and `CancelTask`.

Each function runs the SDK's async client on an event loop of its own, for the length
of the call: the worker's threads are plain threads, and none waits on a remote task.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from jarvis_agents.remote_agents import RemoteAgent
from jarvis_agents.retry import remote_send_policy

TIMEOUT_S = 15.0
# What a call can meet on the way: the card or the agent unreachable, refused or garbled.
UNREACHABLE = (httpx.HTTPError, A2AClientError, OSError, ValueError)

ENDED = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
         TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED,
         TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}


@dataclass(frozen=True)
class Outcome:
    """A remote task that has ended (or stopped to ask): how, what it said, and what it
    says it used (`Usage.to_json()`'s shape), if it says."""

    state: int
    text: str
    usage: dict[str, int] | None = None


def send(agent: RemoteAgent, goal: str, *, message_id: uuid.UUID) -> str | Outcome:
    """SendMessage with `returnImmediately`: the remote task's id, or the outcome when the
    agent answered with a message (no task). Raises one of UNREACHABLE."""
    request = SendMessageRequest(
        message=Message(message_id=str(message_id), role=Role.ROLE_USER, parts=[Part(text=goal)]),
        configuration=SendMessageConfiguration(return_immediately=True))

    async def call(client: Any) -> str | Outcome:
        async for event in client.send_message(request):
            if event.HasField("task"):
                return event.task.id
            if event.HasField("message"):
                return Outcome(TaskState.TASK_STATE_COMPLETED, _text(event.message.parts))
        raise ValueError("the agent answered the message with nothing")

    for attempt in remote_send_policy(is_cut):
        with attempt:
            sent = asyncio.run(_with_client(agent, call))
    return sent


def is_cut(exc: BaseException) -> bool:
    """The connection was refused, reset or cut, or timed out (the SDK's error says so in
    its cause): the message may have reached the agent, or not."""
    return isinstance(exc.__cause__ or exc, httpx.TransportError | OSError)


def poll(agent: RemoteAgent, task_ids: Sequence[str]) -> dict[str, Outcome | Exception]:
    """GetTask for each id at once: the outcome of those that have ended, or the error
    met asking (a task still going is left out)."""
    async def call(client: Any) -> dict[str, Outcome | Exception]:
        found = await asyncio.gather(*(client.get_task(GetTaskRequest(id=task_id))
                                       for task_id in task_ids), return_exceptions=True)
        ended: dict[str, Outcome | Exception] = {}
        for task_id, task in zip(task_ids, found, strict=True):
            if isinstance(task, Exception):
                ended[task_id] = task
            elif task.status.state in ENDED:
                ended[task_id] = outcome_of(task)
        return ended

    return asyncio.run(_with_client(agent, call))


def cancel(agent: RemoteAgent, task_id: str) -> None:
    """CancelTask. Raises one of UNREACHABLE (an ended task's refusal too)."""
    async def call(client: Any) -> None:
        await client.cancel_task(CancelTaskRequest(id=task_id))

    asyncio.run(_with_client(agent, call))


def outcome_of(task: Task) -> Outcome:
    """The artifacts' text of a completed task; else its status message's."""
    if task.status.state == TaskState.TASK_STATE_COMPLETED:
        return Outcome(task.status.state,
                       "\n".join(_text(artifact.parts) for artifact in task.artifacts).strip(),
                       _usage(task))
    return Outcome(task.status.state, _text(task.status.message.parts), _usage(task))


def _usage(task: Task) -> dict[str, int] | None:
    """The usage the task's metadata reports: `usage_total` (its whole tree, as our own
    server says it, jarvis_agents/a2a/tasks.py), else `usage`; None if neither is there."""
    metadata = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    found = metadata.get("usage_total") or metadata.get("usage")
    if not isinstance(found, dict):
        return None
    try:
        return {name: max(0, int(found.get(name) or 0))
                for name in ("input_tokens", "output_tokens", "model_calls")}
    except (TypeError, ValueError):
        return None  # garbled: counted as nothing rather than failing the call


def _text(parts: Any) -> str:
    return "\n".join(part.text for part in parts if part.HasField("text"))


async def _with_client(agent: RemoteAgent, call: Any) -> Any:
    """Resolve the agent's card and run `call` with a client of it, headers on every request."""
    async with httpx.AsyncClient(headers=dict(agent.headers), timeout=TIMEOUT_S) as http:
        card = await A2ACardResolver(http, agent.base_url,
                                     agent.card_path.lstrip("/")).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        return await call(client)
