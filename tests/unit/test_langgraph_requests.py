"""The SDK's run bodies read into ours (jarvis_agents/langgraph/requests.py)."""

from __future__ import annotations

import pytest

from jarvis_agents.errors import RequestError
from jarvis_agents.langgraph.requests import run_request


def test_the_goal_is_the_last_human_message_in_any_of_the_sdks_shapes():
    body = {"assistant_id": "agent", "input": {"messages": [
        {"role": "user", "content": "first"}, {"type": "ai", "content": "answer"},
        {"type": "human", "content": [{"type": "text", "text": "second"}]},
        {"role": "assistant", "content": "later"}]}}
    request = run_request(body)
    assert request.goal == "second" and request.multitask_strategy == "reject"
    assert request.stream_modes == ("values",)


def test_a_resume_answers_an_approval():
    request = run_request({"assistant_id": "agent",
                           "command": {"resume": {"approve": False, "reason": "no"}}})
    assert (request.goal, request.approve, request.reason) == (None, False, "no")


@pytest.mark.parametrize("body, says", [
    ({"input": {"messages": [{"role": "user", "content": "x"}]}}, "assistant_id"),
    ({"assistant_id": "agent", "input": {"messages": []}}, "last human message"),
    ({"assistant_id": "agent", "input": {"messages": [{"role": "ai", "content": "x"}]}},
     "no human"),
    ({"assistant_id": "agent", "command": {"resume": "yes"}}, "approve"),
    ({"assistant_id": "agent", "command": {"goto": "x"}}, "only `command.resume`"),
    ({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "x"}]},
      "multitask_strategy": "rollback"}, "rollback"),
    ({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "x"}]},
      "stream_mode": "debug"}, "debug"),
    ({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "x" * 4001}]}},
     "at most 4000"),
])
def test_a_body_that_cannot_run_is_a_400_that_says_why(body, says):
    with pytest.raises(RequestError, match=says):
        run_request(body)
