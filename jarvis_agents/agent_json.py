"""The agent JSON (docs/api.md, "Agent JSON"): the one builder of that shape, used by the
API, the webhooks and every protocol door that hands out an agent."""

from __future__ import annotations

from typing import Any

from jarvis_agents.lifecycle import Agent, AgentStatus, isoformat


def agent_json(agent: Agent) -> dict[str, Any]:
    """Every field always present, so every agent has one shape; null outside its state."""
    completed = agent.status is AgentStatus.COMPLETED
    return {
        "id": str(agent.id),
        "goal": agent.goal,
        "status": agent.status.value,
        "model": agent.model,
        "max_steps": agent.max_steps,
        "step_count": agent.step_count,
        "tools": list(agent.tools) if agent.tools is not None else None,
        "webhook_url": agent.webhook_url,
        "created_at": isoformat(agent.created_at),
        "started_at": isoformat(agent.started_at),
        "completed_at": isoformat(agent.completed_at),
        "updated_at": isoformat(agent.updated_at),
        "duration_ms": agent.duration_ms,
        "stop_reason": agent.stop_reason.value if agent.stop_reason else None,
        "approve_tools": list(agent.approve_tools) if agent.approve_tools is not None else None,
        "waiting_for": _waiting_for(agent),
        "trace_id": agent.trace_id,
        "final_answer": agent.final_answer if completed else None,
        "error": agent.error if agent.status is AgentStatus.FAILED else None,
        "mode": agent.mode.value,
        "usage": agent.usage.to_json(),
        "usage_total": (agent.usage + agent.descendants_usage).to_json(),
        "output_schema": agent.output_schema,
        "output": agent.output if completed else None,
        "thread_id": str(agent.thread_id or agent.id),
        "parent_id": _id(agent.parent_id),
        "forked_from": (
            {"agent_id": str(agent.forked_from_id), "seq": agent.forked_from_seq}
            if agent.forked_from_id else None
        ),
        "context": (
            {"turns": agent.context.get("turns", 0), "left_out": agent.context.get("left_out", 0)}
            if agent.context else None
        ),
        "assistant_id": _id(agent.assistant_id),
        "assistant_version": agent.assistant_version,
        "caller_id": _id(agent.caller_id),
        "caller_call_id": agent.caller_call_id,
        "root_id": _id(agent.root_id or agent.id),
        "depth": agent.depth,
        "schedule_id": _id(agent.schedule_id),
        "scheduled_for": isoformat(agent.scheduled_for),
    }


def _waiting_for(agent: Agent) -> dict[str, Any] | None:
    if agent.status is not AgentStatus.WAITING or agent.waiting_for is None:
        return None
    # It waits from its move to WAITING, the last change a WAITING agent's row sees.
    return {**agent.waiting_for, "since": isoformat(agent.updated_at)}


def _id(value: object) -> str | None:
    return str(value) if value is not None else None
