"""A person in the loop (docs/api.md §7): which tool calls wait for an approval, what an
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol

from jarvis_agents.errors import Conflict
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, storable, utcnow

ALL_TOOLS = "*"


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

    def denied(self, act: Step) -> Step:
        """The OBSERVE row of a denied call (numbered by the caller)."""
        return Step(0, act.step, StepType.OBSERVE, storable(self.observation), tool=act.tool,
                    created_at=utcnow(), duration_ms=0, call_id=act.call_id)


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

    def first_waiting(self, agent: Agent, acts: Iterable[Step]) -> Step | None:
        """The first of an iteration's calls that must wait for a person, if any."""
        return next((act for act in acts if self.waits(agent, act)), None)

    def waits(self, agent: Agent, act: Step) -> bool:
        """Whether this call must wait for a person: gated, and not answered yet."""
        return self.needs_approval(agent, act.tool) and self.answer_for(agent, act) is None

    def answer_for(self, agent: Agent, act: Step) -> Answer | None:
        """The answer given to this very call, if any."""
        approval = (agent.approval or {}).get(call_id_of(act))
        if not approval:
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
    def resume(
        self, agent_id: uuid.UUID, *, user_id: uuid.UUID, attempt: int, max_active: int | None,
        **fields: object,
    ) -> bool: ...


def wait(store: WaitingStore, agent: Agent, rows: Sequence[Step], act: Step) -> Agent | None:
    """RUNNING → WAITING on the call `act`, with the iteration's `rows`, in one transaction
    (which also owes the `agent.waiting` webhook); None if the attempt no longer owns it."""
    waiting = replace(
        agent.with_waiting(call_id=call_id_of(act), tool=act.tool or "", tool_input=act.content),
        step_count=act.step + 1,
    )
    if not store.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.WAITING, attempt=agent.attempt, steps=rows,
        waiting_for=waiting.waiting_for, heartbeat_at=None, now=waiting.updated_at,
    ):
        return None
    return waiting


def answer(
    store: WaitingStore, agent: Agent, *, call_id: str, approve: bool,
    tool_input: str | None = None, reason: str | None = None, max_active: int | None = None,
) -> Agent:
    """WAITING → PENDING with the answer recorded, compare-and-set on the attempt that
    waits: a second answer, or one that lost a race with another or a cancel, is a
    Conflict and changes nothing. PENDING counts against the user's active limit, as a
    create does: past `max_active` it is RateLimited and the agent goes on waiting
    (README, Approvals). The caller queues the agent."""
    waiting = agent.waiting_for or {}
    if agent.status is not AgentStatus.WAITING or agent.waits_on_agents:
        raise Conflict(f"agent {agent.id} is {agent.status.value}, not waiting for an approval",
                       code="not_waiting")
    if waiting.get("call_id") != call_id:
        raise Conflict(f"agent {agent.id} is waiting for call {waiting.get('call_id')!r}, "
                       f"not {call_id!r}", code="wrong_call_id")
    answered = agent.with_answered(approve=approve, tool_input=tool_input, reason=reason)
    task_id = f"{agent.id}:{agent.attempt + 1}"
    if not store.resume(
        agent.id, user_id=agent.user_id, attempt=agent.attempt, max_active=max_active,
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
    if agent.waits_on_agents:
        return None  # it waits on its children or a remote agent, not on a person
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
