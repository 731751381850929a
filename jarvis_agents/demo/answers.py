"""What the demo model says: the README's example goals, solved with the built-in tools.

It does arithmetic with `calculate` ("What is 1234 * 902?") and tells the time with
`getTime` ("What time is it in Tokyo?"), both in one goal too, then answers with what the
tools said. It reads the request as a model would: the goal, the results its calls have had
so far, and which tools it may call. In native mode (the request lists `tools`) it makes
tool calls; in text mode it writes the ReACT protocol (THOUGHT / ACTION / INPUT, then
FINAL_ANSWER). Any other goal gets an answer that says what it can do. Offered a
delegate (`ask_<name>`, README: Agents that call agents), it hands each part of the goal
to it instead (in native mode all at once), then answers with what came back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jarvis_agents.demo.replies import ToolCall, Turn

# A run of arithmetic with at least one operator between two numbers: "1234 * 902".
ARITHMETIC = re.compile(r"[-(]*\d[\d.,]*(?:\s*(?:\*\*|[-+*/^×÷%])\s*[-(]*\d[\d.,]*\)*)+")
TIME_IN = re.compile(r"\btime\b.*?\bin\s+([^?!.,;]+)", re.IGNORECASE)
NOW = re.compile(r"\s+(?:right\s+)?(?:now|today)$", re.IGNORECASE)  # "in Tokyo right now"
OBSERVATION = "OBSERVATION:"
# The parameter of each tool it calls (also read from the request's tools when it has them).
PARAMETERS = {"calculate": "expression", "getTime": "place"}
# How it asks a delegate for each kind of part.
QUESTIONS = {"calculate": "What is {}?", "getTime": "What time is it in {}?"}
CAN_DO = ("I am the jarvis-agents demo model: I can do arithmetic (\"What is 1234 * 902?\") "
          "and tell the time in a city (\"What time is it in Tokyo?\"). For anything else, "
          "connect a real model (see the README, Models).")


@dataclass(frozen=True)
class Call:
    """A call the goal needs: which tool, on what input, and why (the model's thought)."""

    tool: str
    text: str
    thought: str


def answer(request: dict[str, Any]) -> Turn:
    """The demo model's reply to a chat request, in either protocol."""
    messages = request.get("messages") or []
    at, goal = _goal(messages)
    results = _results(messages[at + 1:])
    native = bool(request.get("tools"))
    calls = plan(goal)
    if not calls:
        return _final(CAN_DO, "This is not a goal I can work on.", native=native)
    if (delegate := _delegate(request)) is not None:
        return _delegated(calls, results, delegate, request, native=native)
    missing = [call.tool for call in calls if not _offered(call.tool, request)]
    if missing:
        return _final(f"I would need the {missing[0]} tool, which this agent may not use.",
                      f"{missing[0]} is not among my tools.", native=native)
    if len(results) < len(calls):
        return _call(calls[len(results)], request, native=native)
    said = [_said(call, result) for call, result in zip(calls, results, strict=False)]
    return _final(" ".join(said), "The tools have told me what I need.", native=native)


def plan(goal: str) -> list[Call]:
    """The calls `goal` needs, in order: its arithmetic, then the time it asks for."""
    calls = []
    for found in ARITHMETIC.finditer(goal):
        expression = found.group(0).replace("×", "*").replace("÷", "/").strip().rstrip(".,")
        calls.append(Call("calculate", expression, f"I need to calculate {expression}."))
    if place := TIME_IN.search(goal):
        where = NOW.sub("", place.group(1).strip())
        calls.append(Call("getTime", where, f"I need the current time in {where}."))
    return calls


def _goal(messages: list[dict[str, Any]]) -> tuple[int, str]:
    """Where the goal is and what it says: the last user message that is not a tool's
    observation (a thread's earlier turns come before it)."""
    for at in range(len(messages) - 1, -1, -1):
        message = messages[at]
        content = str(message.get("content") or "")
        if message.get("role") == "user" and not content.startswith(OBSERVATION):
            return at, content
    return len(messages), ""


def _results(after_goal: list[dict[str, Any]]) -> list[str]:
    """What its calls have returned so far: tool messages, or the text protocol's
    OBSERVATION lines."""
    found = []
    for message in after_goal:
        content = str(message.get("content") or "")
        if message.get("role") == "tool":
            found.append(content.strip())
        elif message.get("role") == "user" and content.startswith(OBSERVATION):
            found.append(content.removeprefix(OBSERVATION).strip())
    return found


def _offered(tool: str, request: dict[str, Any]) -> bool:
    if request.get("tools"):
        return tool in {spec.get("function", {}).get("name") for spec in request["tools"]}
    prompt = next((str(m.get("content") or "") for m in request.get("messages") or []
                   if m.get("role") == "system"), "")
    return f"- {tool}:" in prompt


def _call(call: Call, request: dict[str, Any], *, native: bool) -> Turn:
    if native:
        return Turn(text=call.thought,
                    tool_calls=(ToolCall(call.tool, {_parameter(call.tool, request): call.text}),))
    return Turn(text=f"THOUGHT: {call.thought}\nACTION: {call.tool}\nINPUT: {call.text}")


def _delegate(request: dict[str, Any]) -> str | None:
    """The first `ask_<name>` tool the request offers, if any."""
    if request.get("tools"):
        names = [str(spec.get("function", {}).get("name")) for spec in request["tools"]]
    else:
        prompt = str((request.get("messages") or [{}])[0].get("content") or "")
        names = re.findall(r"^- (ask_[A-Za-z0-9_-]+):", prompt, re.MULTILINE)
    return next((name for name in names if name.startswith("ask_")), None)


def _delegated(calls: list[Call], results: list[str], delegate: str, request: dict[str, Any], *,
               native: bool) -> Turn:
    """Each part of the goal asked of `delegate`, then the answer from what it said."""
    if len(results) >= len(calls):
        return _final(" ".join(r.rstrip(".") + "." for r in results), "Each part is answered.",
                      native=native)
    questions = [QUESTIONS[call.tool].format(call.text) for call in calls]
    if native and not results:  # every part at once: the delegates work side by side
        return Turn(text=f"I will ask {delegate} each part.", tool_calls=tuple(
            ToolCall(delegate, {"goal": question}) for question in questions))
    question = questions[len(results)]
    return _call(Call(delegate, question, f"I will ask {delegate}: {question}"), request,
                 native=native)


def _parameter(tool: str, request: dict[str, Any]) -> str:
    """The name of `tool`'s one parameter, as its schema in the request says."""
    for spec in request.get("tools") or []:
        function = spec.get("function") or {}
        if function.get("name") == tool:
            parameters = function.get("parameters") or {}
            named = parameters.get("required") or list(parameters.get("properties") or {})
            if named:
                return str(named[0])
    return PARAMETERS.get(tool, "input")


def _said(call: Call, result: str) -> str:
    said = f"{call.text} = {result}" if call.tool == "calculate" else result
    return said.rstrip(".") + "."


def _final(text: str, thought: str, *, native: bool) -> Turn:
    return Turn(text=text) if native else Turn(text=f"THOUGHT: {thought}\nFINAL_ANSWER: {text}")
