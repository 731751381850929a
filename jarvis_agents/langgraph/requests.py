"""The bodies LangGraph's SDK sends, read into what our agents need (README, LangGraph SDK).

The SDK sends every field its call knows; those that have no meaning here (checkpoints,
nodes to interrupt at, durability …) are accepted and left aside, as a server without
that feature would. A field we cannot honour in a way the caller would notice
(`multitask_strategy` "rollback") is a 400 that says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jarvis_agents.errors import RequestError

STRATEGIES = ("reject", "enqueue", "interrupt")
IF_NOT_EXISTS = ("reject", "create")
ON_DISCONNECT = ("continue", "cancel")
HUMAN_ROLES = ("human", "user")
MAX_GOAL_CHARS = 4000  # as a create of the REST API


@dataclass(frozen=True)
class RunRequest:
    """A run create: the assistant (id or name), and either a goal or an answer."""

    assistant: str
    goal: str | None = None
    approve: bool | None = None  # a `command.resume` answering an interrupt
    reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    multitask_strategy: str = "reject"
    if_not_exists: str = "reject"
    stream_modes: tuple[str, ...] = ("values",)
    on_disconnect: str = "continue"  # a stream's: "cancel" cancels the run when its client goes


def _object(body: dict[str, Any], name: str) -> dict[str, Any]:
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(f"`{name}` must be an object")
    return value


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    value = body.get(name)
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise RequestError(f"`{name}` must be one of {', '.join(allowed)}, not {str(value)[:40]!r}")
    return value


def stream_modes(value: Any) -> tuple[str, ...]:
    """The stream modes asked for (one or a list); the default is `values`."""
    from jarvis_agents.langgraph.stream import MODES

    modes = [value] if isinstance(value, str) else value
    if modes is None or modes == []:
        return ("values",)
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise RequestError("`stream_mode` must be a stream mode or a list of them")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise RequestError(f"stream mode(s) {', '.join(unknown)} are not served; "
                           f"these are: {', '.join(MODES)}")
    return tuple(dict.fromkeys(modes))


def message_text(message: Any) -> str | None:
    """The text of a human or user message (a dict, as the SDK sends LangChain messages),
    None for any other message."""
    if not isinstance(message, dict):
        return None
    if message.get("role", message.get("type")) not in HUMAN_ROLES:
        return None
    content = message.get("content")
    if isinstance(content, list):  # content blocks: their text parts, in order
        content = "\n".join(block.get("text", "") if isinstance(block, dict) else str(block)
                            for block in content if not isinstance(block, dict)
                            or block.get("type", "text") == "text")
    return content if isinstance(content, str) else None


def goal_of(run_input: dict[str, Any]) -> str:
    """The goal: the last human/user message of `input.messages`."""
    messages = run_input.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError('`input` must be {"messages": [...]} whose last human message '
                           "is the goal")
    texts = [text for text in map(message_text, messages) if text is not None]
    if not texts or not texts[-1].strip():
        raise RequestError("`input.messages` has no human (or user) message with text: "
                           "its last one is the goal")
    goal = texts[-1].strip()
    if len(goal) > MAX_GOAL_CHARS:
        raise RequestError(f"the goal (the last human message) is {len(goal)} characters; "
                           f"at most {MAX_GOAL_CHARS}")
    return goal


def run_request(body: dict[str, Any]) -> RunRequest:
    assistant = body.get("assistant_id")
    if not isinstance(assistant, str) or not assistant.strip():
        raise RequestError("`assistant_id` is required: an assistant's id or name, or \"agent\"")
    strategy = _choice(body, "multitask_strategy", STRATEGIES + ("rollback",))
    if strategy == "rollback":
        raise RequestError("multitask_strategy \"rollback\" is not served: an agent's steps "
                           "are never deleted (use reject, enqueue or interrupt)")
    metadata = _object(body, "metadata")
    common = {"assistant": assistant.strip(), "metadata": metadata, "multitask_strategy": strategy,
              "if_not_exists": _choice(body, "if_not_exists", IF_NOT_EXISTS),
              "stream_modes": stream_modes(body.get("stream_mode")),
              "on_disconnect": _choice(body, "on_disconnect", ON_DISCONNECT)}
    command = _object(body, "command")
    if "resume" in command:
        resume = command["resume"]
        if isinstance(resume, dict) and isinstance(resume.get("approve"), bool):
            reason = resume.get("reason")
            return RunRequest(approve=resume["approve"],
                              reason=reason if isinstance(reason, str) else None, **common)
        raise RequestError('`command.resume` answers an approval: {"approve": true|false, '
                           '"reason"?: str}')
    if command:
        raise RequestError("only `command.resume` is served (goto and update need a graph)")
    return RunRequest(goal=goal_of(_object(body, "input")), **common)
