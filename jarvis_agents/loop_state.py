"""What the ReACT loop (executor.py) stands on: where an agent stands, rebuilt from its
persisted steps alone; its time limits; and what it needs of the store."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, Step, StepType, Usage


@dataclass
class LoopState:
    """Where the agent stands, rebuilt from its persisted steps."""

    history: list[Step]
    next_step: int
    next_seq: int
    pending_acts: list[Step]  # ACTs of the last iteration whose OBSERVE was never written

    @classmethod
    def rebuild(cls, steps: list[Step]) -> LoopState:
        if not steps:
            return cls([], 0, 1, [])
        last = max(s.step for s in steps)
        rows = [s for s in steps if s.step == last]
        observed = {s.call_id for s in rows if s.type is StepType.OBSERVE}
        pending = [s for s in rows if s.type is StepType.ACT and s.call_id not in observed]
        return cls(steps, last if pending else last + 1, max(s.seq for s in steps) + 1, pending)

    def usage(self, rows: Sequence[Step] = ()) -> Usage:
        """The model calls' usage over the history and then `rows`."""
        total = Usage()
        for steps in (self.history, rows):
            for step in steps:
                if step.usage is not None:
                    total = total + step.usage
        return total


class StepStore(Protocol):
    """What the loop needs of persistence (the Repository provides it)."""

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None: ...
    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]: ...
    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None: ...
    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, **fields: object
    ) -> bool: ...
    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None: ...


@dataclass(frozen=True)
class Limits:
    step_timeout_s: float
    total_timeout_s: float
