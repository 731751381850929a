"""A run's events in LangGraph's stream modes (README, LangGraph SDK).

What happens comes from `jarvis_agents.events.follow` (steps, live tokens, a wait, the
end); this module says it as LangGraph's server would: `metadata` first, then per step
`values` (the thread's messages so far), `updates` (the node's new message) and
`messages` (the `messages-tuple` mode: `[message chunk, metadata]`; our live tokens are
the chunks), then `end` last. A step's events go out together, the last of them with
`id:` = the step's seq, so a client that resumes with `Last-Event-ID` gets every step
once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jarvis_agents.langgraph.messages import AI, TOOL, Conversation
from jarvis_agents.langgraph.shapes import NODE, TOOLS_NODE, RunView, interrupts_of
from jarvis_agents.lifecycle import Agent, AgentStatus

MODES = ("values", "updates", "messages-tuple")


@dataclass(frozen=True)
class Frame:
    """One SSE event: its name, data, and id (a step's seq, on the last of its events)."""

    event: str
    data: Any
    id: str | None = None


class RunEvents:
    """The frames of one client's stream of one run."""

    def __init__(self, view: RunView, talk: Conversation, modes: tuple[str, ...]) -> None:
        self.view = view
        self.talk = talk
        self.modes = modes
        self._tokens_of: set[int] = set()  # iterations whose text went out as tokens

    def _meta(self, step: Any, node: str) -> dict[str, Any]:
        return {"run_id": str(self.view.run_id), "thread_id": str(self.view.thread_id),
                "assistant_id": self.view.assistant_id, "langgraph_node": node,
                "langgraph_step": step}

    def step(self, data: dict[str, Any]) -> list[Frame]:
        """A step's frames (a persisted step's JSON or a published step event's data)."""
        message = self.talk.step(data)
        if message is None:
            return []
        node = TOOLS_NODE if message["type"] == TOOL else NODE
        frames = []
        if "messages-tuple" in self.modes:
            chunk = self._chunk(data, message)
            if chunk is not None:
                frames.append(Frame("messages", [chunk, self._meta(data.get("step"), node)]))
        if "updates" in self.modes:
            frames.append(Frame("updates", {node: {"messages": [message]}}))
        if "values" in self.modes:
            frames.append(Frame("values", {"messages": list(self.talk.messages)}))
        if frames:
            last = frames[-1]
            frames[-1] = Frame(last.event, last.data, str(data.get("seq")))
        return frames

    def _chunk(self, data: dict[str, Any], message: dict[str, Any]) -> dict[str, Any] | None:
        """What `messages-tuple` says of a step: a tool's result whole; a reply's text
        whole unless its tokens told it already; a tool call as a chunk of its reply."""
        kind = str(data.get("type", "")).upper()
        if message["type"] != AI:
            return message
        if kind == "ACT":
            call = message["tool_calls"][-1]
            return {**ai_chunk("", message["id"]), "tool_calls": [call]}
        if data.get("step") in self._tokens_of:
            return None
        return {**ai_chunk(str(data.get("content") or ""), message["id"])}

    def token(self, data: dict[str, Any]) -> list[Frame]:
        """A live token (`{"agent_id", "step", "delta"}`) as a message chunk."""
        if "messages-tuple" not in self.modes:
            return []
        step = data.get("step")
        if isinstance(step, int):
            self._tokens_of.add(step)
        agent_id = data.get("agent_id") or self.view.run_id
        chunk = ai_chunk(str(data.get("delta") or ""), f"{agent_id}:{step}")
        return [Frame("messages", [chunk, self._meta(step, NODE)])]

    def waiting(self, agent: Agent) -> list[Frame]:
        """The interrupt of an agent that waits for an approval."""
        interrupts = interrupts_of(agent)
        frames = []
        if "updates" in self.modes:
            frames.append(Frame("updates", {"__interrupt__": interrupts}))
        if "values" in self.modes:
            frames.append(Frame("values", {"messages": list(self.talk.messages),
                                           "__interrupt__": interrupts}))
        return frames

    def ended(self, agent: Agent) -> list[Frame]:
        """The last frames: an `error` for a failed run, then `end`."""
        status = RunView.of_agent(agent).status
        frames = []
        if agent.status is AgentStatus.FAILED:
            frames.append(Frame("error", {"error": "AgentFailed",
                                          "message": agent.error or "the run failed"}))
        frames.append(Frame("end", {"run_id": str(self.view.run_id), "status": status}))
        return frames


def metadata_frame(view: RunView) -> Frame:
    """The first event of a stream."""
    return Frame("metadata", {"run_id": str(view.run_id), "attempt": 1})


def ai_chunk(content: str, message_id: str) -> dict[str, Any]:
    return {"content": content, "additional_kwargs": {}, "response_metadata": {},
            "type": "AIMessageChunk", "name": None, "id": message_id, "example": False,
            "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": None,
            "tool_call_chunks": []}
