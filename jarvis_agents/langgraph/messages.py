"""A thread's agents as LangChain messages, the `values.messages` of LangGraph's state
(README, LangGraph SDK).

Each agent of a thread gives: its goal as a `human` message; per ReACT iteration, an
`ai` message whose content is the reply's text (its THINK) and whose `tool_calls` are
the iteration's ACTs; each OBSERVE as a `tool` message answering its call; the FINAL as
an `ai` message holding the answer. Ids are stable (`<agent id>:<iteration>` for an ai
message, `<agent id>:<seq>` for a tool message), so a message grown by a later step of
its iteration replaces the earlier one in a client that merges by id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

HUMAN, AI, TOOL = "human", "ai", "tool"


def _base(kind: str, content: str, message_id: str) -> dict[str, Any]:
    return {"content": content, "additional_kwargs": {}, "response_metadata": {},
            "type": kind, "name": None, "id": message_id}


def human_message(content: str, message_id: str) -> dict[str, Any]:
    return {**_base(HUMAN, content, message_id), "example": False}


def ai_message(content: str, message_id: str,
               tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {**_base(AI, content, message_id), "example": False, "tool_calls": tool_calls or [],
            "invalid_tool_calls": [], "usage_metadata": None}


def tool_message(content: str, message_id: str, *, tool: str | None,
                 call_id: str | None) -> dict[str, Any]:
    return {**_base(TOOL, content, message_id), "name": tool, "tool_call_id": call_id or "",
            "artifact": None, "status": "success"}


def tool_call(step: dict[str, Any]) -> dict[str, Any]:
    """An ACT as a tool call: its content is the arguments (JSON text in native mode, the
    INPUT string in the text contract, which becomes `{"input": …}`)."""
    content = str(step.get("content") or "")
    try:
        args = json.loads(content)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        args = {"input": content}
    return {"name": step.get("tool") or "", "args": args, "id": step.get("call_id") or "",
            "type": "tool_call"}


class Conversation:
    """The messages of one thread, grown step by step (a persisted step's JSON or a
    published step event's data: both have `seq`, `step`, `type`, `tool`, `content`,
    `call_id`)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}
        self._agent: str | None = None

    def goal(self, agent_id: str, goal: str) -> dict[str, Any]:
        self._agent = agent_id
        return self._put(human_message(goal, f"{agent_id}:goal"))

    def step(self, step: dict[str, Any]) -> dict[str, Any] | None:
        """Take a step in; the message it made or changed (None for an ERROR)."""
        kind = str(step.get("type", "")).upper()
        iteration = f"{self._agent}:{step.get('step')}"
        content = str(step.get("content") or "")
        if kind == "OBSERVE":
            return self._put(tool_message(content, f"{self._agent}:{step.get('seq')}",
                                          tool=step.get("tool"), call_id=step.get("call_id")))
        current = self._get(iteration) or ai_message("", iteration)
        if kind == "THINK":
            current = {**current, "content": content}
        elif kind == "ACT":
            current = {**current, "tool_calls": [*current["tool_calls"], tool_call(step)]}
        elif kind == "FINAL":
            current = {**current, "content": content}
        else:
            return None
        return self._put(current)

    def _get(self, message_id: str) -> dict[str, Any] | None:
        at = self._index.get(message_id)
        return self.messages[at] if at is not None else None

    def _put(self, message: dict[str, Any]) -> dict[str, Any]:
        at = self._index.get(message["id"])
        if at is None:
            self._index[message["id"]] = len(self.messages)
            self.messages.append(message)
        else:
            self.messages[at] = message
        return message


def conversation(turns: Iterable[tuple[str, str, Iterable[dict[str, Any]]]]) -> Conversation:
    """The conversation of `(agent id, goal, steps)` turns, oldest first."""
    talk = Conversation()
    for agent_id, goal, steps in turns:
        talk.goal(agent_id, goal)
        for step in steps:
            talk.step(step)
    return talk
