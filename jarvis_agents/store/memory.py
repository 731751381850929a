"""An in-memory store with the repository's semantics, for unit tests and demos.

It keeps the rules that matter to the engine: status changes are compare-and-set,
and a step write is refused unless the agent is RUNNING under that attempt.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from jarvis_agents.errors import StaleAttempt
from jarvis_agents.lifecycle import (
    Agent,
    AgentMode,
    AgentStatus,
    Step,
    Usage,
    check_transition,
    utcnow,
)


class MemoryStore:
    def __init__(self) -> None:
        self.agents: dict[uuid.UUID, Agent] = {}
        self.steps: dict[uuid.UUID, list[Step]] = {}
        self._lock = threading.Lock()

    def add(self, agent: Agent) -> Agent:
        with self._lock:
            self.agents[agent.id] = agent
            self.steps.setdefault(agent.id, [])
        return agent

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None:
        agent = self.agents.get(agent_id)
        if agent is None or (user_id is not None and agent.user_id != user_id):
            return None
        return agent

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]:
        return [s for s in self.steps.get(agent_id, []) if s.seq > seq]

    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None:
        with self._lock:
            agent = self.agents[agent_id]
            if agent.status is not AgentStatus.RUNNING or agent.attempt != attempt:
                raise StaleAttempt(f"agent {agent_id} is not RUNNING under attempt {attempt}")
            self._check_unique(agent_id, steps)
            self.steps[agent_id].extend(steps)
            self.agents[agent_id] = replace(agent, step_count=step_count, heartbeat_at=utcnow(),
                                            usage=_used(agent.usage, steps))

    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None:
        with self._lock:
            agent = self.agents[agent_id]
            if agent.status is AgentStatus.RUNNING and agent.attempt == attempt:
                self.agents[agent_id] = replace(agent, mode=mode)

    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, *,
        attempt: int | None = None, heartbeat_before: datetime | None = None,
        steps: Sequence[Step] = (), **fields: Any,
    ) -> bool:
        check_transition(expected, new)
        with self._lock:
            agent = self.agents[agent_id]
            if agent.status is not expected or (attempt is not None and agent.attempt != attempt):
                return False
            if heartbeat_before is not None and not (
                agent.heartbeat_at is not None and agent.heartbeat_at < heartbeat_before
            ):
                return False
            now = fields.pop("now", None) or utcnow()
            if new.is_terminal:
                fields.setdefault("completed_at", now)
            self._check_unique(agent_id, steps)
            self.steps[agent_id].extend(steps)
            usage = _used(agent.usage, steps)
            if "input_tokens" in fields:  # the executor's totals, as the repository takes them
                usage = Usage(fields.pop("input_tokens"), fields.pop("output_tokens"),
                              fields.pop("model_calls"))
            self.agents[agent_id] = replace(agent, status=new, updated_at=now, usage=usage, **fields)
            return True

    def _check_unique(self, agent_id: uuid.UUID, steps: Sequence[Step]) -> None:
        existing = self.steps[agent_id]
        seqs = {s.seq for s in existing}
        kinds = {(s.step, s.type, s.call_id or "") for s in existing}
        for step in steps:
            if step.seq in seqs or (step.step, step.type, step.call_id or "") in kinds:
                raise AssertionError(f"duplicate step written: {step}")


def _used(usage: Usage, steps: Sequence[Step]) -> Usage:
    """`usage` with the model calls whose tokens these rows carry."""
    for step in steps:
        if step.usage is not None:
            usage = usage + Usage(step.usage.input_tokens, step.usage.output_tokens, 1)
    return usage
