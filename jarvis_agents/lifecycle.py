"""The agent lifecycle as data: statuses, the transition table, and the Agent that owns it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from uuid_utils.compat import uuid7

from jarvis_agents.errors import InvalidTransition
from jarvis_agents.trace_context import new_traceparent, trace_id_of


class AgentStatus(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    # Paused on a tool call a person must approve (docs/api.md §7); no worker holds it.
    WAITING = "WAITING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({AgentStatus.COMPLETED, AgentStatus.FAILED, AgentStatus.CANCELLED})
ACTIVE = frozenset({AgentStatus.PENDING, AgentStatus.RUNNING})

# The whole lifecycle: anything not listed here is refused.
TRANSITIONS: dict[AgentStatus, frozenset[AgentStatus]] = {
    AgentStatus.PENDING: frozenset({AgentStatus.RUNNING, AgentStatus.CANCELLED}),
    AgentStatus.RUNNING: frozenset(
        {AgentStatus.WAITING, AgentStatus.COMPLETED, AgentStatus.FAILED, AgentStatus.CANCELLED}
    ),
    # Answered: PENDING again, for a new attempt; or it waited too long, or was cancelled.
    AgentStatus.WAITING: frozenset(
        {AgentStatus.PENDING, AgentStatus.FAILED, AgentStatus.CANCELLED}
    ),
    AgentStatus.COMPLETED: frozenset(),
    AgentStatus.FAILED: frozenset(),
    AgentStatus.CANCELLED: frozenset(),
}


def check_transition(current: AgentStatus, target: AgentStatus) -> None:
    """Raise InvalidTransition unless the table allows `current → target`."""
    if target not in TRANSITIONS[current]:
        raise InvalidTransition(current.value, target.value)


class StopReason(str, Enum):
    FINAL_ANSWER = "final_answer"
    MAX_STEPS = "max_steps"
    TOTAL_TIMEOUT = "total_timeout"
    STEP_TIMEOUT = "step_timeout"
    MODEL_ERROR = "model_error"
    WORKER_LOST = "worker_lost"
    CANCELLED = "cancelled"
    APPROVAL_TIMEOUT = "approval_timeout"
    INVALID_OUTPUT = "invalid_output"
    INTERNAL_ERROR = "internal_error"  # a bug of the system's own, not a fault around it


class AgentMode(str, Enum):
    """How an agent speaks to its model (docs/api.md §6): `auto` is what a create asks for
    by default, and becomes `native` or `react` when the agent starts."""

    AUTO = "auto"
    NATIVE = "native"
    REACT = "react"


@dataclass(frozen=True)
class Usage:
    """Tokens read and written, and model calls made, summed over some model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.model_calls + other.model_calls)

    def to_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "model_calls": self.model_calls}


class StepType(str, Enum):
    THINK = "THINK"
    ACT = "ACT"
    OBSERVE = "OBSERVE"
    FINAL = "FINAL"
    ERROR = "ERROR"


def new_agent_id() -> uuid.UUID:
    """A new agent's id, time-ordered (UUIDv7): its rows go to the right edge of every index
    led by the id, so that the pages written stay cached however many steps the store holds."""
    return uuid7()


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Step:
    """One persisted record of an iteration: a thought, an action, an observation, …"""

    seq: int
    step: int
    type: StepType
    content: str
    tool: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    duration_ms: int | None = None
    # Pairs an ACT with its OBSERVE: the model's own id in native mode, else one made.
    call_id: str | None = None
    # The tokens of the model call that produced this row's iteration, on its first row.
    usage: Usage | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "step": self.step,
            "type": self.type.value,
            "tool": self.tool,
            "content": self.content,
            "created_at": isoformat(self.created_at),
            "duration_ms": self.duration_ms,
            "call_id": self.call_id if self.type in (StepType.ACT, StepType.OBSERVE) else None,
            "usage": None if self.usage is None else {
                "input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens},
        }


class IterationRows:
    """The rows one model call's reply becomes, as a strategy reads them: numbered from
    `seq`, made at one moment, the first carrying the call's duration and usage."""

    def __init__(self, *, step: int, seq: int, duration_ms: int, usage: Usage) -> None:
        self.step = step
        self.seq = seq
        self.duration_ms = duration_ms
        self.usage = usage
        self.now = utcnow()
        self.rows: list[Step] = []

    def add(self, type: StepType, content: str, *, tool: str | None = None,
            call_id: str | None = None) -> list[Step]:
        first = not self.rows
        self.rows.append(Step(
            self.seq + len(self.rows), self.step, type, content, tool=tool, created_at=self.now,
            duration_ms=self.duration_ms if first else None, call_id=call_id,
            usage=self.usage if first else None,
        ))
        return self.rows


@dataclass(frozen=True)
class Agent:
    """An agent and its place in the lifecycle; every change returns a new Agent."""

    id: uuid.UUID
    user_id: uuid.UUID
    goal: str
    model: str
    max_steps: int
    status: AgentStatus = AgentStatus.PENDING
    step_count: int = 0
    final_answer: str | None = None
    error: str | None = None
    stop_reason: StopReason | None = None
    tools: tuple[str, ...] | None = None
    webhook_url: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    attempt: int = 0
    # How many of those attempts ended with their worker lost (a hand-back is not one).
    losses: int = 0
    task_id: str | None = None
    heartbeat_at: datetime | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    # Approvals (docs/api.md §7): the tools whose calls wait for a person ("*": all), the
    # call waited on while WAITING ({"call_id", "tool", "input"}), the answers given, by
    # call id ({"approve", "input", "reason"}), and the time spent waiting so far, which
    # the total timeout leaves out.
    approve_tools: tuple[str, ...] | None = None
    waiting_for: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    waited_ms: int = 0
    # The mode asked for until the agent starts, then the one in use (docs/api.md §6).
    mode: AgentMode = AgentMode.AUTO
    usage: Usage = field(default_factory=Usage)
    output_schema: dict[str, Any] | None = None
    output: Any = None
    # Conversations and forks (docs/api.md §8): a thread's id is its first agent's id.
    thread_id: uuid.UUID | None = None
    parent_id: uuid.UUID | None = None
    forked_from_id: uuid.UUID | None = None
    forked_from_seq: int | None = None
    # What the thread's earlier agents give this one's model (jarvis_agents/threads.py).
    context: Mapping[str, Any] | None = field(default=None, hash=False)
    # The W3C trace context the agent's spans continue (trace_context.py); None only
    # for an agent created before it was kept.
    traceparent: str | None = None
    # The assistant (and its version) whose configuration it took; `instructions` join
    # the system prompt, `delegates` become its `ask_<name>` tools (README, Assistants).
    assistant_id: uuid.UUID | None = None
    assistant_version: int | None = None
    instructions: str | None = None
    delegates: tuple[str, ...] | None = None
    # Agents that call agents (README, Agents that call agents): the calling agent and
    # its call, the first caller of the chain, and how deep below it this one is.
    caller_id: uuid.UUID | None = None
    caller_call_id: str | None = None
    root_id: uuid.UUID | None = None
    depth: int = 0
    # The usage of its descendants that have ended; usage_total adds its own.
    descendants_usage: Usage = field(default_factory=Usage)
    # The schedule that made it, and the due time it was made for (README, Schedules).
    schedule_id: uuid.UUID | None = None
    scheduled_for: datetime | None = None

    @classmethod
    def new(
        cls,
        *,
        user_id: uuid.UUID,
        goal: str,
        model: str,
        max_steps: int,
        tools: tuple[str, ...] | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        approve_tools: tuple[str, ...] | None = None,
        mode: AgentMode = AgentMode.AUTO,
        output_schema: dict[str, Any] | None = None,
        traceparent: str | None = None,
        assistant_id: uuid.UUID | None = None,
        assistant_version: int | None = None,
        instructions: str | None = None,
        delegates: tuple[str, ...] | None = None,
    ) -> Agent:
        """A PENDING agent; without `traceparent` (the create's trace), a new trace."""
        now = utcnow()
        agent_id = new_agent_id()
        return cls(
            id=agent_id,
            thread_id=agent_id,
            user_id=user_id,
            goal=goal,
            model=model,
            max_steps=max_steps,
            tools=tools,
            webhook_url=webhook_url,
            created_at=now,
            updated_at=now,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            approve_tools=approve_tools,
            mode=mode,
            output_schema=output_schema,
            traceparent=traceparent or new_traceparent(),
            assistant_id=assistant_id,
            assistant_version=assistant_version,
            instructions=instructions,
            delegates=delegates,
        )

    @property
    def trace_id(self) -> str:
        """The agent's trace (32 hex digits); an agent older than its traceparent
        column gets its id's, which no other agent has."""
        return trace_id_of(self.traceparent) if self.traceparent else self.id.hex

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    @property
    def waits_on_agents(self) -> bool:
        """WAITING on the agents it called (README, Agents that call agents), or standing
        for a call of a remote one, not on a person."""
        return (self.status is AgentStatus.WAITING
                and (self.waiting_for or {}).get("kind") in ("agents", "remote"))

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None:
            return None
        end = self.completed_at or utcnow()
        return max(0, int((end - self.started_at).total_seconds() * 1000))

    def _moved(self, target: AgentStatus, **changes: object) -> Agent:
        check_transition(self.status, target)
        now = changes.pop("now", None) or utcnow()
        if target.is_terminal:
            changes.setdefault("completed_at", now)
        return replace(self, status=target, updated_at=now, **changes)

    def with_running(self, *, attempt: int, now: datetime | None = None) -> Agent:
        now = now or utcnow()
        return self._moved(
            AgentStatus.RUNNING, now=now, attempt=attempt, started_at=self.started_at or now,
            heartbeat_at=now,
        )

    def with_completed(
        self, final_answer: str, *, output: Any = None, now: datetime | None = None,
        step_count: int | None = None, usage: Usage | None = None,
    ) -> Agent:
        """COMPLETED with `final_answer`; `step_count` and `usage` as they ended, if given."""
        return self._moved(
            AgentStatus.COMPLETED, now=now, final_answer=final_answer, output=output,
            stop_reason=StopReason.FINAL_ANSWER,
            step_count=self.step_count if step_count is None else step_count,
            usage=self.usage if usage is None else usage,
        )

    def with_failed(
        self, error: str, *, stop_reason: StopReason, now: datetime | None = None,
        step_count: int | None = None, usage: Usage | None = None,
    ) -> Agent:
        """FAILED with `error`; `step_count` and `usage` as they ended, if given."""
        return self._moved(
            AgentStatus.FAILED, now=now, error=error, stop_reason=stop_reason,
            step_count=self.step_count if step_count is None else step_count,
            usage=self.usage if usage is None else usage,
        )

    def with_waiting(
        self, *, call_id: str, tool: str, tool_input: str, now: datetime | None = None
    ) -> Agent:
        return self._moved(
            AgentStatus.WAITING, now=now, heartbeat_at=None,
            waiting_for={"call_id": call_id, "tool": tool, "input": tool_input},
        )

    def with_answered(
        self, *, approve: bool, tool_input: str | None, reason: str | None,
        now: datetime | None = None,
    ) -> Agent:
        """WAITING → PENDING with the answer to the call it waited on."""
        now = now or utcnow()
        if self.waiting_for is None:
            raise InvalidTransition(self.status.value, AgentStatus.PENDING.value)
        waited = int((now - (self.updated_at or now)).total_seconds() * 1000)
        return self._moved(
            AgentStatus.PENDING, now=now, waiting_for=None, waited_ms=self.waited_ms + max(0, waited),
            approval={**(self.approval or {}), self.waiting_for["call_id"]: {
                "approve": approve, "input": tool_input, "reason": reason}},
        )

    def with_cancelled(self, *, now: datetime | None = None) -> Agent:
        return self._moved(AgentStatus.CANCELLED, now=now, stop_reason=StopReason.CANCELLED)

    def to_json(self) -> dict[str, object]:
        """The agent JSON (docs/api.md, "Agent JSON"): one builder, jarvis_agents/agent_json.py."""
        from jarvis_agents.agent_json import agent_json  # it reads Agent: imported when used

        return agent_json(self)


def storable(text: str) -> str:
    """`text` as every store can hold it: NUL characters (PostgreSQL refuses them) and
    lone surrogates (UTF-8 has none), which a model or a tool may send, become U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def isoformat(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, the one timestamp format of the API."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
