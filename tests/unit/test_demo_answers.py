"""The demo model (`jarvis-agents demo-model`): what it answers the README's goals, as
the worker asks them in native mode (tools) and in text mode (the ReACT protocol)."""

from __future__ import annotations

from typing import Any

import pytest

from jarvis_agents.demo.answers import answer, plan
from jarvis_agents.demo.replies import ToolCall, Turn
from jarvis_agents.react.parser import Action, FinalAnswer, parse_reply
from jarvis_agents.react.prompt import render_system_prompt
from jarvis_agents.tools.base import RegisteredTool
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.builtin.get_time import GetTimeTool

TOOLS = [RegisteredTool.of(tool, source="builtin") for tool in (CalculateTool(), GetTimeTool())]


def native(goal: str, *results: str, tools: list[str] | None = None) -> dict[str, Any]:
    """A native-mode request: the goal, each earlier call and its result, the tools."""
    offered = [t for t in TOOLS if tools is None or t.name in tools]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are Jarvis."},
                                      {"role": "user", "content": goal}]
    for result in results:
        messages += [{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]},
                     {"role": "tool", "content": result}]
    return {"messages": messages, "tools": [
        {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
        for t in offered]}


def text_mode(goal: str, *results: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": render_system_prompt(TOOLS)},
                {"role": "user", "content": goal}]
    for result in results:
        messages += [{"role": "assistant", "content": "…"},
                     {"role": "user", "content": f"OBSERVATION: {result}"}]
    return {"messages": messages}


def test_native_mode_calls_the_tools_then_answers_with_what_they_said() -> None:
    goal = "What is 1234 * 902?"
    assert answer(native(goal)) == Turn(text="I need to calculate 1234 * 902.", tool_calls=(
        ToolCall("calculate", {"expression": "1234 * 902"}),))
    assert answer(native(goal, "1113068")) == Turn(text="1234 * 902 = 1113068.")
    time_goal = "What time is it in Tokyo right now?"
    assert answer(native(time_goal)).tool_calls == (ToolCall("getTime", {"place": "Tokyo"}),)
    said = "Tokyo: 2026-01-02 12:04 (Friday), time zone Asia/Tokyo, UTC+09:00"
    assert answer(native(time_goal, said)).text == said + "."


def test_text_mode_writes_the_react_protocol_the_parser_reads() -> None:
    first = parse_reply(answer(text_mode("What time is it in Tokyo?")).text)
    assert isinstance(first, Action) and (first.tool, first.tool_input) == ("getTime", "Tokyo")
    done = parse_reply(answer(text_mode("What is 6*7?", "42")).text)
    assert isinstance(done, FinalAnswer) and done.answer == "6*7 = 42."


def test_a_goal_of_both_kinds_calls_both_tools_in_turn() -> None:
    goal = "What is 6*7, and what time is it in New York?"
    assert [(c.tool, c.text) for c in plan(goal)] == [("calculate", "6*7"), ("getTime", "New York")]
    assert answer(native(goal, "42")).tool_calls[0].name == "getTime"
    assert answer(native(goal, "42", "New York: 10:00")).text == "6*7 = 42. New York: 10:00."


@pytest.mark.parametrize("request_of", [native, text_mode])
def test_another_goal_gets_what_it_can_do(request_of: Any) -> None:
    said = answer(request_of("Tell me a joke"))
    assert "demo model" in said.text and "What is 1234 * 902?" in said.text
    assert said.tool_calls == ()


def test_a_tool_the_agent_may_not_use_is_not_called() -> None:
    refused = answer(native("What is 2+2?", tools=["getTime"]))
    assert refused.tool_calls == () and "calculate" in refused.text


def test_offered_a_delegate_it_asks_it_each_part_then_answers_with_what_came_back() -> None:
    goal = "What is 6*7, and what time is it in Tokyo?"
    delegate = {"type": "function", "function": {"name": "ask_researcher", "parameters": {
        "type": "object", "properties": {"goal": {"type": "string"}}, "required": ["goal"]}}}
    asked = native(goal)
    asked["tools"].append(delegate)
    assert answer(asked).tool_calls == (
        ToolCall("ask_researcher", {"goal": "What is 6*7?"}),
        ToolCall("ask_researcher", {"goal": "What time is it in Tokyo?"}))
    told = native(goal, "6*7 = 42.", "Tokyo: 12:04")
    told["tools"].append(delegate)
    assert answer(told) == Turn(text="6*7 = 42. Tokyo: 12:04.")
