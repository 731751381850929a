"""A scripted model for a team of assistants that call each other (README, Agents that
call agents), told apart by a marker in their instructions (`ROLE:<name>`), in native
tool calling or the text protocol alike.

- `boss` asks its first delegate the goals in `Team.questions` (in one reply: they fan out),
  then answers with what came back;
- `researcher` answers `researched: <goal>`, once `Team.gate` is open;
- `chain` asks `chain` again until its call is refused, then answers with what it got;
- `analyst` answers `{"answer": <goal's first line>}` as JSON, loosely spaced;
- `failer` calls a tool when it has one step: it FAILS at the step limit;
- any other agent answers `42` at once.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from jarvis_agents.demo.replies import ToolCall, Turn

BOSS_USAGE = (100, 50)
RESEARCHER_USAGE = (10, 5)


def role(name: str) -> str:
    return f"ROLE:{name}"


class Team:
    """The responder (a FakeOllama's `responder`), and the gate researchers wait at."""

    def __init__(self, *, questions: tuple[str, ...] = ("Find the boiling point of water",)) -> None:
        self.questions = questions
        self.gate = threading.Event()
        self.gate.set()
        # Held boss replies after the first one (a resume to catch), while cleared.
        self.boss_gate = threading.Event()
        self.boss_gate.set()

    def __call__(self, request: dict[str, Any]) -> str | Turn:
        messages = request["messages"]
        system, goal = messages[0]["content"], messages[1]["content"]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        native = bool(request.get("tools"))
        told = observations(messages, native=native)
        if role("researcher") in system:
            self.gate.wait(60)
            return answer(f"researched: {goal}", native=native, usage=RESEARCHER_USAGE)
        if role("analyst") in system:  # its output_schema wants {"answer": str}
            asked = goal.splitlines()[0]  # the schema is said after the goal
            return answer('{ "answer" :  ' + json.dumps(asked) + " }", native=native)
        if role("failer") in system:
            return call("calculate", ["1+1"], native=native, usage=RESEARCHER_USAGE)
        if role("chain") in system:
            if turn == 0:
                return call("ask_chain", [f"go deeper than: {goal}"], native=native)
            return answer(f"chain got: {told[-1]}", native=native)
        if role("boss") not in system:
            return answer("42", native=native)  # an agent of no assistant of the team
        if turn == 0:
            return call(delegate_tool(request), list(self.questions), native=native,
                        usage=BOSS_USAGE)
        self.boss_gate.wait(60)
        return answer("The team says: " + " | ".join(told), native=native, usage=BOSS_USAGE)


def delegate_tool(request: dict[str, Any]) -> str:
    """The first `ask_<name>` tool the request offers (as a function, or in the prompt)."""
    offered = json.dumps(request.get("tools") or []) + request["messages"][0]["content"]
    found = re.search(r"ask_[a-z0-9_-]+", offered)
    return found.group(0) if found else "ask_nobody"


def observations(messages: list[dict[str, Any]], *, native: bool) -> list[str]:
    if native:
        return [m["content"] for m in messages if m["role"] == "tool"]
    return [m["content"].removeprefix("OBSERVATION: ") for m in messages[2:]
            if m["role"] == "user" and m["content"].startswith("OBSERVATION: ")]


def call(tool: str, goals: list[str], *, native: bool,
         usage: tuple[int, int] | None = None) -> str | Turn:
    """A reply that calls `tool` once per goal (the text protocol: the first only)."""
    if native:
        return Turn(tool_calls=[ToolCall(tool, {"goal": goal}, id=f"call_{i}")
                                for i, goal in enumerate(goals)], usage=usage)
    return Turn(text=f"THOUGHT: ask\nACTION: {tool}\nINPUT: {goals[0]}", usage=usage)


def answer(text: str, *, native: bool, usage: tuple[int, int] | None = None) -> Turn:
    return Turn(text=text if native else f"THOUGHT: done\nFINAL_ANSWER: {text}", usage=usage)
