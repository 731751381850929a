"""An agent's delegates as tools (README, Agents that call agents): `ask_<name>` for each
assistant named in its `delegates`, with that assistant's description and one parameter,
`goal`. The tool is listed to the model like any other; its call never runs as a tool:
the executor hands it to `Delegation`, which starts the child agent instead.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from jarvis_agents.assistants import AssistantStore, find_assistant
from jarvis_agents.errors import JarvisError, ToolError
from jarvis_agents.lifecycle import Agent, AgentStatus, Step
from jarvis_agents.tools.arguments import ArgumentsError, arguments_from_text
from jarvis_agents.tools.base import RegisteredTool, ToolContext, string_schema

PREFIX = "ask_"
SOURCE = "delegate"
GOAL = "goal"
MAX_GOAL_CHARS = 4000  # as a create's


def tool_name(delegate: str) -> str:
    return f"{PREFIX}{delegate}"


class DelegateTool:
    """`ask_<name>`: what the model sees of a delegate. Calls are the executor's to make."""

    blocking = True  # never inline: its call parks the caller

    def __init__(self, delegate: str, description: str) -> None:
        self.delegate = delegate
        self.name = tool_name(delegate)
        self.description = description
        self.input_schema = string_schema(
            GOAL, "The task for this assistant, complete in itself: it sees nothing else.")

    def run(self, arguments: Mapping[str, Any], *, context: ToolContext) -> str:
        raise ToolError(f"{self.name} starts an agent; it cannot run as a plain tool")


def delegate_tools(agent: Agent, assistants: AssistantStore, *,
                   remote: Collection[str] = ()) -> list[RegisteredTool]:
    """The agent's `ask_<name>` tools, described as their assistants are now (one read
    per delegate; a delegate deleted since is left out); a name that is none of the
    user's assistants may be one of the `remote` agents (JARVIS_A2A_AGENTS)."""
    found = []
    for name in agent.delegates or ():
        try:
            assistant = find_assistant(assistants, agent.user_id, name)
        except JarvisError:
            if name in remote:
                found.append(RegisteredTool.of(DelegateTool(name, (
                    f"Ask the remote agent '{name}' to do a task and wait for its answer.")),
                    source=SOURCE))
            continue
        description = (assistant.config.description
                       or f"Ask the assistant '{name}' to do a task and wait for its answer.")
        found.append(RegisteredTool.of(DelegateTool(name, description), source=SOURCE))
    return found


def delegate_of(agent: Agent, act: Step) -> str | None:
    """The delegate an ACT calls, if it is a call of one of the agent's `ask_` tools."""
    tool = (act.tool or "").strip().lower()
    if not tool.startswith(PREFIX):
        return None
    return next((d for d in agent.delegates or () if tool_name(d).lower() == tool), None)


def goal_of(act: Step) -> tuple[str | None, str | None]:
    """The call's goal, or why it has none (an observation for the model)."""
    try:
        arguments = arguments_from_text(act.tool or "", string_schema(GOAL, ""), act.content)
    except ArgumentsError as exc:
        return None, str(exc)
    goal = arguments.get(GOAL)
    if not isinstance(goal, str) or not goal.strip():
        return None, f"{act.tool} needs a non-blank `goal`: the task, in words"
    if len(goal) > MAX_GOAL_CHARS:
        return None, f"{act.tool}'s `goal` is over {MAX_GOAL_CHARS} characters; say it shorter"
    return goal, None


def observation_of(child: Agent) -> str:
    """What the call of a child that has ended tells its caller's model."""
    if child.status is AgentStatus.COMPLETED:
        if child.output_schema is not None and child.output is not None:
            return json.dumps(child.output)
        return child.final_answer or ""
    if child.status is AgentStatus.FAILED:
        if (child.waiting_for or {}).get("kind") == "remote":
            return child.error or ""  # says what became of the remote task (delegation/remote.py)
        return f"failed: {child.error}"
    return "cancelled"


def child_ids(waiting_for: Mapping[str, Any] | None) -> list[uuid.UUID]:
    """The children a caller waits on, from its `waiting_for`; [] for any other wait."""
    if not waiting_for or waiting_for.get("kind") != "agents":
        return []
    return [uuid.UUID(str(raw)) for raw in waiting_for.get("agent_ids") or ()]


def waits_on(agent_ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    return {"kind": "agents", "agent_ids": [str(agent_id) for agent_id in agent_ids]}
