"""What travels on the bus: the channels, the messages and their wire encoding.

One channel per agent (its steps and status changes), one per user (the status
changes of all its agents), one control channel (cancels, heard by every worker).
`step_event` is the one builder of a step's event JSON (docs/api.md §4): the SSE data
of a live step is what the worker published, that of a replayed one is built here
from the stored step, the same way.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Final

from jarvis_agents.lifecycle import Agent, Step, isoformat

AGENT_CHANNEL: Final = "jarvis:agent:{}"
USER_CHANNEL: Final = "jarvis:user:{}"
CONTROL_CHANNEL: Final = "jarvis:control"


@dataclass(frozen=True)
class Message:
    """One message as a subscriber sees it: `kind` is "step", "status", "token" or "cancel"."""

    channel: str
    kind: str
    data: dict[str, Any]


def step_event(agent_id: uuid.UUID, step: Step) -> dict[str, Any]:
    """The SSE data of a step event (docs/api.md §4): the step JSON of §2 with its agent's
    id first and the type in lower case."""
    body = step.to_json()
    body["type"] = step.type.value.lower()
    return {"agent_id": str(agent_id), **body}


def waiting_event(agent: Agent) -> dict[str, Any]:
    """The SSE data of a `waiting` event (docs/api.md §4): the call the agent waits on."""
    waiting = agent.waiting_for or {}
    data = {"agent_id": str(agent.id), "call_id": waiting.get("call_id"),
            "tool": waiting.get("tool"), "input": waiting.get("input")}
    if waiting.get("kind") == "agents":  # on its children (README, Agents that call agents)
        data["agent_ids"] = waiting.get("agent_ids")
    return data


def status_event(agent: Agent) -> dict[str, Any]:
    return {
        "agent_id": str(agent.id),
        "status": agent.status.value,
        "stop_reason": agent.stop_reason.value if agent.stop_reason else None,
        "step_count": agent.step_count,
        "updated_at": isoformat(agent.updated_at or agent.created_at),
    }


def encode(kind: str, data: dict[str, Any]) -> str:
    """The payload published for a message of `kind`."""
    return json.dumps({"kind": kind, "data": data}, separators=(",", ":"))


def decode(channel: str | bytes, payload: str | bytes) -> Message | None:
    """Parse a published payload; None for anything that is not ours."""
    try:
        body = json.loads(payload)
        return Message(
            channel.decode() if isinstance(channel, bytes) else channel, body["kind"], body["data"]
        )
    except (ValueError, KeyError, TypeError):
        return None
