"""A person in the loop (CONTRACT §7): which tool calls wait for an approval, what an
answer does to the call, and the two use cases around a WAITING agent.

The executor asks one question before a tool call, `ApprovalGate.waits`: a call of a
gated tool that has no answer yet ends the attempt with the agent WAITING (the ACT and
the status change in one transaction), and no worker holds it. The answer (`answer`)
moves it WAITING → PENDING and queues it; the attempt that resumes it finds the ACT
without its OBSERVE, and `ApprovalGate.answer_for` says how to run it: on the input
the person gave, or not at all (`denied: <reason>` is its observation).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from jarvis_agents.errors import Conflict
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StopReason, utcnow

ALL_TOOLS = "*"


def new_call_id() -> str:
    """A call id the system makes for a tool call the model gave none (the text mode)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def call_id_of(act: Step) -> str:
    """The ACT's call id; an ACT written before call ids existed is known by its seq."""
    return act.call_id or f"seq_{act.seq}"


@dataclass(frozen=True)
class Answer:
    """A person's answer to one call, as the resumed attempt applies it."""

    approve: bool
    tool_input: str
    reason: str | None

    @property
    def observation(self) -> str:
        """A denial's observation, for the model to go on without the call."""
        return f"denied: {self.reason or 'the call was not approved'}"


class ApprovalGate:
    """Which calls need a person's approval: the agent's `approve_tools` and the
    operator's JARVIS_APPROVE_TOOLS, by name (case-insensitive) or `*` for all."""

    def __init__(self, always: Iterable[str] = ()) -> None:
        self.always = frozenset(name.strip().lower() for name in always if name.strip())

    def needs_approval(self, agent: Agent, tool: str | None) -> bool:
        if not self.always and not agent.approve_tools:
            return False  # the common case costs one test
        gated = self.always | {name.lower() for name in agent.approve_tools or ()}
        return bool(gated) and (ALL_TOOLS in gated or (tool or "").lower() in gated)

    def waits(self, agent: Agent, act: Step) -> bool:
        """Whether this call must wait for a person: gated, and not answered yet."""
        return self.needs_approval(agent, act.tool) and self.answer_for(agent, act) is None

    def answer_for(self, agent: Agent, act: Step) -> Answer | None:
        """The answer given to this very call, if any."""
        approval = agent.approval
        if not approval or approval.get("call_id") != call_id_of(act):
            return None
        edited = approval.get("input")
        return Answer(bool(approval.get("approve")),
                      edited if isinstance(edited, str) else act.content,
                      approval.get("reason"))


class WaitingStore(Protocol):
    """What answering and expiring need of persistence (the Repository provides it)."""

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None: ...
    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, **fields: object
    ) -> bool: ...


def answer(
    store: WaitingStore, agent: Agent, *, call_id: str, approve: bool,
    tool_input: str | None = None, reason: str | None = None,
) -> Agent:
    """WAITING → PENDING with the answer recorded, compare-and-set on the attempt that
    waits: a second answer, or one that lost a race with another or a cancel, is a
    Conflict and changes nothing. The caller queues the agent."""
    waiting = agent.waiting_for or {}
    if agent.status is not AgentStatus.WAITING:
        raise Conflict(f"agent {agent.id} is {agent.status.value}, not waiting for an approval",
                       code="not_waiting")
    if waiting.get("call_id") != call_id:
        raise Conflict(f"agent {agent.id} is waiting for call {waiting.get('call_id')!r}, "
                       f"not {call_id!r}", code="wrong_call_id")
    answered = agent.with_answered(approve=approve, tool_input=tool_input, reason=reason)
    task_id = f"{agent.id}:{agent.attempt + 1}"
    if not store.transition(
        agent.id, AgentStatus.WAITING, AgentStatus.PENDING, attempt=agent.attempt,
        waiting_for=None, approval=answered.approval, waited_ms=answered.waited_ms,
        task_id=task_id, now=answered.updated_at,
    ):
        raise Conflict(f"agent {agent.id} was answered or cancelled meanwhile",
                       code="not_waiting")
    return store.get(agent.id) or answered


def expire(store: WaitingStore, agent: Agent, *, timeout_s: float) -> Agent | None:
    """FAILED with `approval_timeout` if it still waits on the same attempt, past its
    deadline; the agent as failed, or None when it moved on meanwhile."""
    if agent.status is not AgentStatus.WAITING or agent.updated_at is None:
        return None
    now = utcnow()
    if now - agent.updated_at < timedelta(seconds=timeout_s):
        return None
    failed = agent.with_failed(
        f"nobody answered the approval of {(agent.waiting_for or {}).get('tool')} within "
        f"{timeout_s:g} s (JARVIS_APPROVAL_TIMEOUT)",
        stop_reason=StopReason.APPROVAL_TIMEOUT, now=now,
    )
    if not store.transition(
        agent.id, AgentStatus.WAITING, AgentStatus.FAILED, attempt=agent.attempt,
        error=failed.error, stop_reason=failed.stop_reason, completed_at=failed.completed_at,
        now=now,
    ):
        return None
    return store.get(agent.id) or failed
