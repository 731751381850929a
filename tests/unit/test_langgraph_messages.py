"""A thread's steps as LangChain messages (jarvis_agents/langgraph/messages.py), checked by
LangChain's own parser."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages

from jarvis_agents.langgraph.messages import Conversation, conversation


def step(seq: int, iteration: int, kind: str, content: str, *, tool: str | None = None,
         call_id: str | None = None) -> dict:
    return {"seq": seq, "step": iteration, "type": kind, "tool": tool, "content": content,
            "call_id": call_id}


def test_an_iteration_with_calls_is_one_ai_message_and_each_result_a_tool_message():
    talk = conversation([("a1", "goal", [
        step(1, 0, "THINK", "let me look"),
        step(2, 0, "ACT", '{"expression": "1+1"}', tool="calculate", call_id="c1"),
        step(3, 0, "ACT", "Paris", tool="getWeather", call_id="c2"),
        step(4, 0, "OBSERVE", "2", tool="calculate", call_id="c1"),
        step(5, 0, "OBSERVE", "sunny", tool="getWeather", call_id="c2"),
        step(6, 1, "THINK", "done"),
        step(7, 1, "FINAL", "2, and sunny"),
    ])])
    messages = convert_to_messages(talk.messages)
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, ToolMessage,
                                           AIMessage]
    assert messages[1].content == "let me look"
    assert [(c["name"], c["args"], c["id"]) for c in messages[1].tool_calls] == [
        ("calculate", {"expression": "1+1"}, "c1"), ("getWeather", {"input": "Paris"}, "c2")]
    assert [m.tool_call_id for m in messages[2:4]] == ["c1", "c2"]
    assert messages[4].content == "2, and sunny"  # the answer, not the thought


def test_a_later_step_of_an_iteration_replaces_its_message_and_errors_add_none():
    talk = Conversation()
    talk.goal("a1", "goal")
    first = talk.step(step(1, 0, "THINK", "hm"))
    second = talk.step(step(2, 0, "ACT", "x", tool="search", call_id="c1"))
    assert first is not None and second is not None and first["id"] == second["id"]
    assert talk.step(step(3, 0, "ERROR", "model down")) is None
    assert len(talk.messages) == 2 and talk.messages[1]["tool_calls"][0]["id"] == "c1"


def test_turns_of_a_thread_follow_each_other():
    talk = conversation([("a1", "one", [step(1, 0, "FINAL", "1")]),
                         ("a2", "two", [step(1, 0, "FINAL", "2")])])
    assert [(m["type"], m["content"]) for m in talk.messages] == [
        ("human", "one"), ("ai", "1"), ("human", "two"), ("ai", "2")]
    assert len({m["id"] for m in talk.messages}) == 4
