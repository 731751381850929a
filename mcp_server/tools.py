"""The user's assistants as MCP tools, and an ended agent as a tool's result (README, MCP server).

One tool per assistant, named after it; its input is a goal and, for a follow-up, a
thread; an assistant with an `output_schema` declares it as the tool's
`outputSchema`, and its answers come back as `structuredContent` too.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from jarvis_agents.assistants import Assistant
from jarvis_agents.lifecycle import Agent, AgentStatus, storable

GOAL_MAX_CHARS: Final = 4000  # as a create's (README, HTTP API)

INPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "goal": {"type": "string", "minLength": 1, "maxLength": GOAL_MAX_CHARS,
                 "description": "What the agent should do or answer, in plain words."},
        "thread_id": {"type": "string", "format": "uuid",
                      "description": "Ask a follow-up in this conversation: the thread_id "
                                     "that an earlier call's result gave in its _meta."},
    },
    "required": ["goal"],
    "additionalProperties": False,
}
# Where a result says which agent answered, and its thread (for a follow-up).
AGENT_ID_META: Final = "jarvis/agent_id"
THREAD_ID_META: Final = "jarvis/thread_id"


def create_fields(arguments: dict[str, Any]) -> dict[str, Any]:
    """A create's fields from a call's arguments; ValueError saying what is wrong."""
    unknown = sorted(set(arguments) - {"goal", "thread_id"})
    if unknown:
        raise ValueError(f"unknown argument(s) {', '.join(unknown)}; a tool takes `goal` and, "
                         "for a follow-up, `thread_id`")
    goal = arguments.get("goal")
    if not isinstance(goal, str) or not goal.strip() or len(goal) > GOAL_MAX_CHARS:
        raise ValueError(f"`goal` must be text of 1 to {GOAL_MAX_CHARS} characters, not blank: "
                         "what the agent should do")
    fields: dict[str, Any] = {"goal": storable(goal)}
    thread = arguments.get("thread_id")
    if thread is not None:
        try:
            fields["thread_id"] = uuid.UUID(str(thread))
        except ValueError:
            raise ValueError(f"`thread_id` must be a thread's id (a UUID), "
                             f"not {str(thread)[:80]!r}") from None
    return fields


def tool_of(assistant: Assistant, *, protocol_version: str) -> types.Tool:
    config = assistant.config
    return types.Tool(
        name=assistant.name,
        title=assistant.name,
        description=config.description or f"Ask the assistant {assistant.name!r} to do a task.",
        input_schema=INPUT_SCHEMA,
        output_schema=_declared(config.output_schema, protocol_version),
    )


def result_of(agent: Agent, *, protocol_version: str) -> types.CallToolResult:
    """The answer of an agent that has ended; any end but COMPLETED is an error result."""
    meta = {AGENT_ID_META: str(agent.id), THREAD_ID_META: str(agent.thread_id or agent.id)}
    if agent.status is AgentStatus.COMPLETED:
        structured = None
        if _declared(agent.output_schema, protocol_version) is not None:
            structured = agent.output
        return types.CallToolResult(content=[text(agent.final_answer or "")],
                                    structured_content=structured, _meta=meta)
    if agent.status is AgentStatus.CANCELLED:
        why = f"agent {agent.id} was cancelled"
    else:
        reason = agent.stop_reason.value if agent.stop_reason else "failed"
        why = f"agent {agent.id} failed ({reason}): {agent.error or 'no error was recorded'}"
    return error_result(why, _meta=meta)


def error_result(message: str, **fields: Any) -> types.CallToolResult:
    """A tool error: the caller (often a model) reads the message and may try again."""
    return types.CallToolResult(content=[text(message)], is_error=True, **fields)


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def _declared(schema: dict[str, Any] | None, protocol_version: str) -> dict[str, Any] | None:
    """The output schema as the tool declares it. Before the 2026-07-28 revision MCP allows
    only an object at the root (of the schema and of `structuredContent`): another schema is
    then left out, and the answer is in the text alone."""
    if schema is None:
        return None
    if protocol_version in MODERN_PROTOCOL_VERSIONS or schema.get("type") == "object":
        return schema
    return None
