"""An agent as an A2A Task, and its events as the protocol's stream events (README, A2A).

Task = agent: `id` is the agent's id, `contextId` its thread. The states map one to one
(PENDING → SUBMITTED, RUNNING → WORKING, WAITING → INPUT_REQUIRED, COMPLETED, FAILED,
CANCELLED → CANCELED). The history is the goal (the user's message), then each step as
an agent message; a COMPLETED task has one artifact, the final answer (and its `output`
where the agent has an `output_schema`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.timestamp_pb2 import Timestamp

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, utcnow

STATES: dict[AgentStatus, int] = {
    AgentStatus.PENDING: TaskState.TASK_STATE_SUBMITTED,
    AgentStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    AgentStatus.WAITING: TaskState.TASK_STATE_INPUT_REQUIRED,
    AgentStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    AgentStatus.FAILED: TaskState.TASK_STATE_FAILED,
    AgentStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
}
STATUSES: dict[int, AgentStatus] = {state: status for status, state in STATES.items()}

ANSWER_ARTIFACT = "final_answer"


def context_id(agent: Agent) -> str:
    return str(agent.thread_id or agent.id)


def value(data: Any) -> struct_pb2.Value:
    """A JSON value as a protobuf Value (a data part's content)."""
    return ParseDict(data, struct_pb2.Value())


def struct(data: dict[str, Any]) -> struct_pb2.Struct:
    return ParseDict(data, struct_pb2.Struct())


def timestamp(moment: datetime | None) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment or utcnow())
    return stamp


def agent_message(agent: Agent, text: str, *, message_id: str, data: Any = None,
                  metadata: dict[str, Any] | None = None) -> Message:
    parts = [Part(text=text)]
    if data is not None:
        parts.append(Part(data=value(data)))
    message = Message(message_id=message_id, context_id=context_id(agent), task_id=str(agent.id),
                      role=Role.ROLE_AGENT, parts=parts)
    if metadata:
        message.metadata.CopyFrom(struct(metadata))
    return message


def goal_message(agent: Agent) -> Message:
    """The user's message that made the task: its goal."""
    return Message(message_id=f"{agent.id}:goal", context_id=context_id(agent),
                   task_id=str(agent.id), role=Role.ROLE_USER, parts=[Part(text=agent.goal)])


def step_message(agent: Agent, step: Step | dict[str, Any]) -> Message:
    """A step (persisted, or a published step event's data) as an agent message; its
    metadata says which step it is (`seq`, `step`, `type`, `tool`)."""
    data = step.to_json() if isinstance(step, Step) else step
    kind = str(data.get("type", "")).upper()
    metadata = {"seq": data.get("seq"), "step": data.get("step"), "type": kind,
                "tool": data.get("tool")}
    return agent_message(agent, str(data.get("content") or ""),
                         message_id=f"{agent.id}:{data.get('seq')}", metadata=metadata)


def status_of(agent: Agent) -> TaskStatus:
    """The task's status: its state, when it changed, and, for INPUT_REQUIRED and FAILED,
    a message saying what is asked or what went wrong."""
    state = STATES[agent.status]
    if agent.waits_on_agents:
        # On the agents it called (README, Agents that call agents): nothing to ask anyone.
        return TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=timestamp(agent.updated_at))
    status = TaskStatus(state=state, timestamp=timestamp(agent.updated_at))
    message = _status_message(agent)
    if message is not None:
        status.message.CopyFrom(message)
    return status


def _status_message(agent: Agent) -> Message | None:
    message_id = f"{agent.id}:{agent.status.value.lower()}"
    if agent.status is AgentStatus.FAILED:
        return agent_message(agent, agent.error or "the agent failed", message_id=message_id)
    if agent.status is AgentStatus.WAITING and agent.waiting_for:
        waiting = dict(agent.waiting_for)
        if "call_id" in waiting:
            text = (f"approve the call of {waiting.get('tool')} with input "
                    f"{waiting.get('input')!r} (call {waiting['call_id']})? Answer with a message "
                    'on this task: a data part {"approve": true|false, "reason"?: str}, or the '
                    "text approve or deny")
        else:
            text = f"waiting for {waiting}"
        return agent_message(agent, text, message_id=message_id, data=waiting)
    return None


def artifacts_of(agent: Agent) -> list[Artifact]:
    """A COMPLETED task's artifact: the final answer as text, and the parsed `output` as
    data where the agent has an `output_schema`."""
    if agent.status is not AgentStatus.COMPLETED:
        return []
    parts = [Part(text=agent.final_answer or "")]
    if agent.output_schema is not None:
        parts.append(Part(data=value({"output": agent.output})))
    return [Artifact(artifact_id=f"{agent.id}:{ANSWER_ARTIFACT}", name=ANSWER_ARTIFACT,
                     parts=parts)]


def task_of(agent: Agent, steps: Sequence[Step | dict[str, Any]] = (), *,
            history_length: int | None = None,
            artifacts: bool = True) -> Task:
    """The agent as a Task; its history is the goal then `steps`, the last
    `history_length` of them when given (0: none)."""
    history = [goal_message(agent), *(step_message(agent, s) for s in steps)]
    if history_length is not None:
        history = history[len(history) - history_length:] if history_length else []
    task = Task(id=str(agent.id), context_id=context_id(agent), status=status_of(agent),
                history=history)
    if artifacts:
        task.artifacts.extend(artifacts_of(agent))
    # Usage as the agent JSON has it: a remote caller counts it (README, Agents that call agents).
    task.metadata.CopyFrom(struct({"assistant_id": str(agent.assistant_id)
                                   if agent.assistant_id else None,
                                   "usage": agent.usage.to_json(),
                                   "usage_total": (agent.usage + agent.descendants_usage).to_json()}))
    return task


def task_event(task: Task) -> StreamResponse:
    return StreamResponse(task=task)


def status_event(agent: Agent, status: TaskStatus | None = None,
                 metadata: dict[str, Any] | None = None) -> StreamResponse:
    update = TaskStatusUpdateEvent(task_id=str(agent.id), context_id=context_id(agent),
                                   status=status if status is not None else status_of(agent))
    if metadata:
        update.metadata.CopyFrom(struct(metadata))
    return StreamResponse(status_update=update)


def step_event(agent: Agent, step: dict[str, Any]) -> StreamResponse:
    """A step as a WORKING status update whose message is the step."""
    status = TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=timestamp(None))
    status.message.CopyFrom(step_message(agent, step))
    return status_event(agent, status)


def ended_events(agent: Agent) -> Iterable[StreamResponse]:
    """What an ended task's stream closes with: its artifact (if COMPLETED), then its
    final status."""
    for artifact in artifacts_of(agent):
        yield StreamResponse(artifact_update=TaskArtifactUpdateEvent(
            task_id=str(agent.id), context_id=context_id(agent), artifact=artifact,
            last_chunk=True))
    yield status_event(agent)


def parse_task_id(raw: str) -> uuid.UUID | None:
    """A task id as an agent id; None when it cannot be one."""
    try:
        return uuid.UUID(raw)
    except (ValueError, TypeError):
        return None


def push_body(agent: Agent) -> str:
    """A push notification's body: the agent's status as a StreamResponse (a status
    update), compact JSON."""
    return json.dumps(MessageToDict(status_event(agent)), separators=(",", ":"))
