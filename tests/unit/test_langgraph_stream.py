"""A run's events in LangGraph's stream modes (jarvis_agents/langgraph/stream.py)."""

from __future__ import annotations

import uuid

from jarvis_agents.langgraph.messages import Conversation
from jarvis_agents.langgraph.shapes import RunView
from jarvis_agents.langgraph.stream import RunEvents

RUN = uuid.UUID(int=1)


def events(*modes: str) -> RunEvents:
    talk = Conversation()
    talk.goal(str(RUN), "goal")
    view = RunView(RUN, RUN, "agent", "running", None, None)
    return RunEvents(view, talk, modes)


def step(seq: int, iteration: int, kind: str, content: str, **extra: object) -> dict:
    return {"seq": seq, "step": iteration, "type": kind, "content": content, "tool": None,
            "call_id": None, **extra}


def test_a_steps_frames_carry_its_seq_on_the_last_only():
    frames = events("values", "updates", "messages-tuple").step(step(1, 0, "THINK", "hm"))
    assert [f.event for f in frames] == ["messages", "updates", "values"]
    assert [f.id for f in frames] == [None, None, "1"]
    assert frames[-1].data["messages"][-1]["content"] == "hm"


def test_a_reply_told_by_its_tokens_is_not_told_again_whole():
    run = events("messages-tuple")
    (token,) = run.token({"agent_id": str(RUN), "step": 0, "delta": "THOUGHT: hm"})
    assert token.data[0]["type"] == "AIMessageChunk" and token.data[0]["content"] == "THOUGHT: hm"
    assert token.data[0]["id"] == f"{RUN}:0" and token.data[1]["langgraph_node"] == "agent"
    assert run.step(step(1, 0, "THINK", "hm")) == []  # its text went out as tokens
    (call,) = run.step(step(2, 0, "ACT", "1+1", tool="calculate", call_id="c1"))
    assert call.data[0]["tool_calls"][0]["id"] == "c1" and call.id == "2"
    (result,) = run.step(step(3, 0, "OBSERVE", "2", tool="calculate", call_id="c1"))
    assert result.data[0]["type"] == "tool" and result.data[1]["langgraph_node"] == "tools"


def test_only_the_modes_asked_for_are_told():
    run = events("updates")
    assert run.token({"agent_id": str(RUN), "step": 0, "delta": "x"}) == []
    (update,) = run.step(step(1, 0, "FINAL", "42"))
    assert update.data == {"agent": {"messages": [run.talk.messages[-1]]}}
