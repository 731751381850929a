"""Our objects in the JSON shapes of LangGraph's server (`langgraph_sdk.schema`): an
assistant, a thread and its state, a run (README, LangGraph SDK).

Run statuses are those LangGraph reports: PENDING (or enqueued) → pending, RUNNING →
running, COMPLETED → success, FAILED → error, and interrupted for a CANCELLED agent or
one WAITING for an approval (its interrupt).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jarvis_agents.assistants import Assistant
from jarvis_agents.lifecycle import Agent, AgentStatus, isoformat

GRAPH_ID = "agent"  # our one graph: every assistant is a configuration of it
NODE = "agent"  # the node that thinks; tool results come from TOOLS_NODE
TOOLS_NODE = "tools"

RUN_STATUS = {
    AgentStatus.PENDING: "pending",
    AgentStatus.RUNNING: "running",
    AgentStatus.WAITING: "interrupted",
    AgentStatus.COMPLETED: "success",
    AgentStatus.FAILED: "error",
    AgentStatus.CANCELLED: "interrupted",
}


@dataclass(frozen=True)
class RunView:
    """A run as the SDK sees it: an agent, an enqueued run not yet one, or a run that
    answered an interrupt and goes on as the interrupted agent (from `after_seq`)."""

    run_id: uuid.UUID
    thread_id: uuid.UUID
    assistant_id: str
    status: str
    created_at: datetime | None
    updated_at: datetime | None
    agent: Agent | None = None
    after_seq: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    multitask_strategy: str = "reject"

    @classmethod
    def of_agent(cls, agent: Agent, *, run_id: uuid.UUID | None = None, after_seq: int = 0,
                 metadata: dict[str, Any] | None = None, strategy: str = "reject") -> RunView:
        # A caller waiting on the agents it called is running, not interrupted.
        status = "running" if agent.waits_on_agents else RUN_STATUS[agent.status]
        return cls(run_id or agent.id, agent.thread_id or agent.id,
                   str(agent.assistant_id) if agent.assistant_id else GRAPH_ID,
                   status, agent.created_at, agent.updated_at, agent,
                   after_seq, metadata or {}, strategy)

    @property
    def ended(self) -> bool:
        return self.status not in ("pending", "running")

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id), "thread_id": str(self.thread_id),
            "assistant_id": self.assistant_id,
            "created_at": isoformat(self.created_at), "updated_at": isoformat(self.updated_at),
            "status": self.status, "metadata": self.metadata,
            "multitask_strategy": self.multitask_strategy, "kwargs": {},
        }


def assistant_json(assistant: Assistant) -> dict[str, Any]:
    config = assistant.config
    return {
        "assistant_id": str(assistant.id), "graph_id": GRAPH_ID,
        "config": {}, "context": {},
        "created_at": isoformat(assistant.created_at), "updated_at": isoformat(assistant.updated_at),
        "metadata": dict(config.metadata or {}), "version": assistant.version,
        "name": assistant.name, "description": config.description,
    }


def interrupts_of(agent: Agent | None) -> list[dict[str, Any]]:
    """The interrupt a WAITING agent raises: its approval's call, answered by a run whose
    `command` is `{"resume": {"approve": bool}}`."""
    if (agent is None or agent.status is not AgentStatus.WAITING or not agent.waiting_for
            or agent.waits_on_agents):
        return []
    waiting = dict(agent.waiting_for)
    value = {"call_id": waiting.get("call_id"), "tool": waiting.get("tool"),
             "input": waiting.get("input"),
             "question": f"approve the call of {waiting.get('tool')}? resume with "
                         '{"approve": true|false}'}
    return [{"value": value, "id": str(waiting.get("call_id") or agent.id)}]


def checkpoint_id_of(agent: Agent) -> str:
    """A state's checkpoint: the agent it is after, and how far that agent had gone."""
    return f"{agent.id}:{agent.step_count}:{agent.status.value}"


def checkpoint(thread_id: uuid.UUID, checkpoint_id: str | None) -> dict[str, Any]:
    return {"thread_id": str(thread_id), "checkpoint_ns": "", "checkpoint_id": checkpoint_id,
            "checkpoint_map": None}


def state_json(thread_id: uuid.UUID, messages: list[dict[str, Any]], *, last: Agent | None,
               parent: str | None = None) -> dict[str, Any]:
    """A thread's state after its agent `last` (the newest of those `messages` tell), or
    the empty state of a thread without one; its checkpoint is named after that agent
    and how far it has gone."""
    interrupts = interrupts_of(last)
    checkpoint_id = checkpoint_id_of(last) if last else None
    tasks = [{"id": str(last.id), "name": NODE, "path": [], "error": None,
              "interrupts": interrupts, "checkpoint": None, "state": None,
              "result": None}] if interrupts and last else []
    return {
        "values": {"messages": messages} if last else {},
        "next": [NODE] if interrupts else [],
        "checkpoint": checkpoint(thread_id, checkpoint_id),
        "metadata": {"run_id": str(last.id)} if last else {},
        "created_at": isoformat(last.updated_at) if last else None,
        "parent_checkpoint": checkpoint(thread_id, parent) if parent else None,
        "tasks": tasks,
        "interrupts": interrupts,
    }


def thread_status(last: Agent | None, *, queued: bool) -> str:
    if last is None:
        return "busy" if queued else "idle"
    if last.status is AgentStatus.WAITING and not last.waits_on_agents:
        return "interrupted"
    if not last.is_terminal or queued:
        return "busy"
    return "error" if last.status is AgentStatus.FAILED else "idle"


def thread_json(thread_id: uuid.UUID, *, created_at: datetime, updated_at: datetime,
                metadata: dict[str, Any], status: str, values: dict[str, Any],
                interrupts: list[dict[str, Any]], last: Agent | None) -> dict[str, Any]:
    return {
        "thread_id": str(thread_id), "created_at": isoformat(created_at),
        "updated_at": isoformat(updated_at), "metadata": metadata, "status": status,
        "values": values,
        "interrupts": {str(last.id): interrupts} if interrupts and last else {},
    }
