"""What a thread gives an agent's model, and where an agent may be forked (threads.py)."""

from __future__ import annotations

import uuid

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.threads import Turn, build_context, fork_points, nearest, turn_of, with_context


def ended(status: AgentStatus, **kw: object) -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal="Add things", model="m", max_steps=3)
    return Agent(**{**agent.__dict__, "status": status, **kw})


def test_a_completed_turn_is_its_answer_and_a_failed_one_says_what_it_had_found() -> None:
    assert turn_of(ended(AgentStatus.COMPLETED, final_answer="4")) == Turn("Add things", "4")
    found = [Step(3, 0, StepType.OBSERVE, "4", tool="calculate"),
             Step(6, 1, StepType.OBSERVE, "x" * 2000, tool="calculate")]
    failed = turn_of(ended(AgentStatus.FAILED, error="the step limit", stop_reason=StopReason.MAX_STEPS),
                     found)
    assert failed.answer.startswith("(I did not finish this: it failed: the step limit.)")
    assert "x" * 1000 in failed.answer and len(failed.answer) < 1600  # the latest, cut
    cancelled = turn_of(ended(AgentStatus.CANCELLED, stop_reason=StopReason.CANCELLED), found[:1])
    assert "it was cancelled" in cancelled.answer and cancelled.answer.endswith("- 4")


def test_the_budget_keeps_the_latest_turns_and_names_the_rest() -> None:
    turns = [Turn(f"goal {n}", "a" * 95) for n in range(50)]  # 101 or 102 characters each
    context = build_context(turns, budget_chars=1000)
    assert context is not None and (context["turns"], context["left_out"]) == (9, 41)
    messages = context["messages"]
    assert messages[0]["role"] == "user" and "41 earlier turn(s)" in messages[0]["content"]
    assert '"goal 40"' in messages[0]["content"] and '"goal 30"' not in messages[0]["content"]
    assert "and 31 before them" in messages[0]["content"]
    assert [m["content"] for m in messages[2::2]] == [f"goal {n}" for n in range(41, 50)]
    assert build_context([], budget_chars=1000) is None
    assert build_context(turns[:3], budget_chars=1000)["left_out"] == 0  # type: ignore[index]


def test_a_latest_turn_over_the_budget_alone_is_cut_not_dropped() -> None:
    context = build_context([Turn("short", "b" * 5000)], budget_chars=1000)
    assert context is not None and context["turns"] == 1
    assert sum(len(m["content"]) for m in context["messages"]) <= 1000


def test_the_turns_go_between_the_system_prompt_and_the_goal() -> None:
    messages = [ChatMessage("system", "rules"), ChatMessage("user", "now"), ChatMessage("assistant", "x")]
    context = build_context([Turn("before", "then")], budget_chars=1000)
    assert [m.content for m in with_context(messages, context)] == ["rules", "before", "then", "now", "x"]
    assert with_context(messages, None) is messages


def test_a_fork_point_is_zero_or_the_end_of_an_iteration_that_observed() -> None:
    steps = [Step(1, 0, StepType.THINK, "t"), Step(2, 0, StepType.ACT, "1", tool="c"),
             Step(3, 0, StepType.OBSERVE, "1", tool="c"), Step(4, 1, StepType.ACT, "2", tool="c"),
             Step(5, 1, StepType.OBSERVE, "2", tool="c"), Step(6, 2, StepType.THINK, "t"),
             Step(7, 2, StepType.FINAL, "2")]
    points = fork_points(steps)
    assert points == [0, 3, 5]
    assert nearest(points, 4) == [3, 5] and nearest(points, 7) == [5] and nearest(points, 1) == [0, 3]
