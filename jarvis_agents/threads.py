"""Conversations and forks (docs/api.md §8): what a thread gives an agent's model, and where
an agent may be forked.

A thread's earlier agents have all ended when a new one is created in it (one agent of
a thread at a time), so what they give the new agent's model is fixed at create: their
goals and answers, oldest first, as user and assistant turns. It is computed once,
within `JARVIS_CONTEXT_CHARS`, and stored with the agent (`Agent.context`); every
iteration, every resume and every fork of the agent sees the same turns. Turns that do
not fit are the oldest ones: they are named in one short note instead, and counted in
the agent JSON's `context.left_out`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType
from jarvis_agents.llm.base import ChatMessage

# What a failed or cancelled turn shows of what it had found: its last observations.
FOUND_MAX_CHARS = 1500
# A left-out goal, as the note names it.
NOTE_GOAL_CHARS = 60


@dataclass(frozen=True)
class Turn:
    """One earlier agent of a thread, as the model sees it: its goal, then its answer."""

    goal: str
    answer: str

    @property
    def chars(self) -> int:
        return len(self.goal) + len(self.answer)


@dataclass(frozen=True)
class Earlier:
    """An agent of a thread as a follow-up needs it: no more is read of each (an agent's
    own stored context may be as long as the budget)."""

    id: uuid.UUID
    status: AgentStatus
    goal: str
    final_answer: str | None = None
    error: str | None = None
    idempotency_key: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal


def turn_of(agent: Agent | Earlier, steps: Sequence[Step] = ()) -> Turn:
    """The turn an ended agent gives its thread. A COMPLETED one its final answer; a
    FAILED or CANCELLED one says so, with what its observations had found (`steps`)."""
    if agent.status is AgentStatus.COMPLETED and agent.final_answer is not None:
        return Turn(agent.goal, agent.final_answer)
    why = f"it failed: {agent.error}" if agent.status is AgentStatus.FAILED else "it was cancelled"
    found = [s.content.strip() for s in steps if s.type is StepType.OBSERVE and s.content.strip()]
    shown: list[str] = []
    for content in reversed(found):  # the latest first, while they fit
        if sum(map(len, shown)) + len(content) > FOUND_MAX_CHARS:
            break
        shown.insert(0, content)
    if not shown and found:
        shown = [_cut(found[-1], FOUND_MAX_CHARS)]
    so_far = ("What I had found so far:\n" + "\n".join(f"- {c}" for c in shown)) if shown else (
        "I had found nothing yet.")
    return Turn(agent.goal, f"(I did not finish this: {why}.) {so_far}")


def build_context(turns: Sequence[Turn], *, budget_chars: int) -> dict[str, Any] | None:
    """The stored context of a new agent after `turns` (oldest first): the most recent
    turns that fit in `budget_chars`, and a note naming those left out. None for none.

    The most recent turn is always kept, cut to the budget if it alone exceeds it.
    """
    if not turns:
        return None
    kept: list[Turn] = []
    used = 0
    for turn in reversed(turns):
        if used + turn.chars > budget_chars:
            if not kept:  # the latest alone is too long: its answer's start is kept
                room = max(budget_chars - len(turn.goal), budget_chars // 2)
                kept.append(Turn(_cut(turn.goal, budget_chars // 2), _cut(turn.answer, room)))
            break
        kept.append(turn)
        used += turn.chars
    kept.reverse()
    left_out = turns[: len(turns) - len(kept)]
    messages: list[dict[str, str]] = []
    if left_out:
        messages.append({"role": "user", "content": _note(left_out)})
        messages.append({"role": "assistant", "content": "Understood."})
    for turn in kept:
        messages.append({"role": "user", "content": turn.goal})
        messages.append({"role": "assistant", "content": turn.answer})
    return {"messages": messages, "turns": len(kept), "left_out": len(left_out)}


def _note(left_out: Sequence[Turn]) -> str:
    goals = "; ".join(f'"{_cut(" ".join(t.goal.split()), NOTE_GOAL_CHARS)}"' for t in left_out[-10:])
    more = f" (and {len(left_out) - 10} before them)" if len(left_out) > 10 else ""
    return (f"This is a conversation. {len(left_out)} earlier turn(s) of it are left out to keep "
            f"it short; their goals were: {goals}{more}. The most recent turns follow.")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def with_context(messages: list[ChatMessage], context: Mapping[str, Any] | None) -> list[ChatMessage]:
    """`messages` (system prompt, goal, iterations) with the thread's turns before the goal."""
    if not context or not context.get("messages"):
        return messages
    at = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    return [*messages[:at], *_earlier(context), *messages[at:]]


# The turns as messages, per stored context: an agent's context is one object for its
# whole run, and its iterations need not build the same messages again (40 of them in a
# thread of 20 turns). Bounded; an entry keeps its context alive, so an id is never reused
# for another context while it is here.
_MESSAGES: dict[int, tuple[Mapping[str, Any], tuple[ChatMessage, ...]]] = {}
_MESSAGES_MAX = 1024


def _earlier(context: Mapping[str, Any]) -> tuple[ChatMessage, ...]:
    cached = _MESSAGES.get(id(context))
    if cached is not None and cached[0] is context:
        return cached[1]
    built = tuple(ChatMessage(role=m["role"], content=m["content"]) for m in context["messages"])
    if len(_MESSAGES) >= _MESSAGES_MAX:
        _MESSAGES.clear()
    _MESSAGES[id(context)] = (context, built)
    return built


def fork_points(steps: Sequence[Step]) -> list[int]:
    """The `after_seq` values a fork of an agent with these steps may take: 0, and the seq
    of the last step of each iteration that ended with its tool's observation (an
    iteration that gave the answer or failed ends the agent; one without its
    observation is not over)."""
    last: dict[int, Step] = {}
    for step in steps:
        if step.step not in last or step.seq > last[step.step].seq:
            last[step.step] = step
    return [0, *sorted(s.seq for s in last.values() if s.type is StepType.OBSERVE)]


def nearest(points: Sequence[int], seq: int) -> list[int]:
    """The valid points either side of `seq` (one when it is past the last)."""
    below = [p for p in points if p < seq]
    above = [p for p in points if p > seq]
    return [*below[-1:], *above[:1]]
