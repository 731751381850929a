"""The store in memory: the whole AgentStore interface (store/interface.py), for unit
tests and demos.

It keeps the rules the engine, the runner and the service rely on: status changes are
compare-and-set; a step write is refused unless the agent is RUNNING under that
attempt; a claim or a take-over starts a new attempt; an idempotency key returns the
earlier agent; the active limit refuses a create. One lock makes each call atomic,
as a transaction makes each statement of the Repository.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from jarvis_agents.errors import Conflict, RateLimited, StaleAttempt
from jarvis_agents.lifecycle import (
    ACTIVE,
    Agent,
    AgentMode,
    AgentStatus,
    Step,
    Usage,
    check_transition,
    utcnow,
)
from jarvis_agents.store.memory_assistants import MemoryAssistants
from jarvis_agents.store.memory_delegation import MemoryDelegation
from jarvis_agents.store.memory_deletions import MemoryDeletions
from jarvis_agents.store.memory_schedules import MemorySchedules
from jarvis_agents.store.rows import decode_cursor, encode_cursor
from jarvis_agents.threads import Earlier


class MemoryStore:
    """Agents and their steps in dictionaries, behind one lock."""

    def __init__(self) -> None:
        self.agents: dict[uuid.UUID, Agent] = {}
        self.steps: dict[uuid.UUID, list[Step]] = {}
        self.assistants = MemoryAssistants()
        self.delegation = MemoryDelegation(self)
        self.schedules = MemorySchedules(self)
        self.deletions = MemoryDeletions(self)
        # The one lock every call holds (the delegation's and deletions' twins share it).
        self.lock = threading.RLock()

    def add(self, agent: Agent) -> Agent:
        """Put `agent` in the store as it is, whatever its status (a test's setup)."""
        with self.lock:
            self.agents[agent.id] = agent
            self.steps.setdefault(agent.id, [])
        return agent

    # --- agents --------------------------------------------------------------------

    def create_agent(self, agent: Agent, *, max_active: int | None = None) -> tuple[Agent, bool]:
        with self.lock:
            if agent.idempotency_key is not None:
                for earlier in self.agents.values():
                    if (earlier.user_id, earlier.idempotency_key) == (agent.user_id, agent.idempotency_key):
                        if earlier.request_hash != agent.request_hash:
                            raise Conflict("this Idempotency-Key was already used with a "
                                           "different request body", code="idempotency_key_reused")
                        return earlier, False
            self._check_active(agent.user_id, max_active)
            self.add(replace(agent, updated_at=_updated(agent), thread_id=_thread(agent)))
        return agent, True

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None:
        agent = self.agents.get(agent_id)
        if agent is None or (user_id is not None and agent.user_id != user_id):
            return None
        return agent

    def get_many(self, agent_ids: Sequence[uuid.UUID]) -> list[Agent]:
        return [agent for agent_id in agent_ids if (agent := self.agents.get(agent_id))]

    def list_agents(
        self, user_id: uuid.UUID, *, status: AgentStatus | None = None, limit: int = 20,
        cursor: str | None = None, thread_id: uuid.UUID | None = None,
        caller_id: uuid.UUID | None = None,
        schedule_id: uuid.UUID | None = None,
    ) -> tuple[list[Agent], str | None]:
        after = decode_cursor(cursor) if cursor is not None else None
        mine = sorted(
            (a for a in list(self.agents.values())
             if a.user_id == user_id and (status is None or a.status is status)
             and (thread_id is None or _thread(a) == thread_id)
             and (caller_id is None or a.caller_id == caller_id)
             and (schedule_id is None or a.schedule_id == schedule_id)
             and (after is None or (a.created_at, a.id) < after)),
            key=lambda a: (a.created_at, a.id), reverse=True,
        )
        page = mine[:limit]
        return page, (encode_cursor(page[-1]) if len(mine) > limit and page else None)

    def models_of(self, agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        return {agent.id: agent.model for agent in self.get_many(agent_ids)}

    def waiting_since(self, cutoff: datetime, *, limit: int = 100) -> list[Agent]:
        waiting = [a for a in list(self.agents.values())
                   if a.status is AgentStatus.WAITING and _updated(a) < cutoff]
        return sorted(waiting, key=_updated)[:limit]

    def agents_of_thread(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> list[Earlier]:
        of_thread = sorted(
            (a for a in list(self.agents.values()) if a.user_id == user_id and _thread(a) == thread_id),
            key=lambda a: (a.created_at, a.id),
        )
        return [Earlier(a.id, a.status, a.goal, a.final_answer, a.error, a.idempotency_key)
                for a in of_thread]

    def insert_fork(self, agent: Agent, steps: Sequence[Step], *, max_active: int | None) -> None:
        with self.lock:
            self._check_active(agent.user_id, max_active)
            self.add(replace(agent, updated_at=_updated(agent), thread_id=_thread(agent)))
            self.steps[agent.id].extend(steps)

    def _check_active(self, user_id: uuid.UUID, max_active: int | None) -> None:
        if max_active is None:
            return
        if sum(1 for a in self.agents.values() if a.user_id == user_id and a.status in ACTIVE) >= max_active:
            raise RateLimited(f"you already have {max_active} agents pending or running "
                              f"(the limit is {max_active}); wait for some to finish")

    # --- the lifecycle --------------------------------------------------------------

    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, *,
        attempt: int | None = None, heartbeat_before: datetime | None = None,
        steps: Sequence[Step] = (), **fields: Any,
    ) -> bool:
        check_transition(expected, new)
        with self.lock:
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
            if "descendants_input_tokens" in fields:  # a caller woken (delegation/service.py)
                fields["descendants_usage"] = Usage(*(fields.pop(f"descendants_{name}") for name in
                                                      ("input_tokens", "output_tokens", "model_calls")))
            self.agents[agent_id] = replace(agent, status=new, updated_at=now, usage=usage, **fields)
            return True

    def resume(
        self, agent_id: uuid.UUID, *, user_id: uuid.UUID, attempt: int, max_active: int | None,
        **fields: Any,
    ) -> bool:
        with self.lock:
            agent = self.agents[agent_id]
            if agent.status is not AgentStatus.WAITING or agent.attempt != attempt:
                return False
            self._check_active(user_id, max_active)
            return self.transition(agent_id, AgentStatus.WAITING, AgentStatus.PENDING,
                                   attempt=attempt, **fields)

    def claim(
        self, agent_id: uuid.UUID, *, task_id: str | None = None, now: datetime | None = None,
        modes: Mapping[str, AgentMode] | None = None,
    ) -> Agent | None:
        now = now or utcnow()
        with self.lock:
            agent = self.agents.get(agent_id)
            if agent is None or agent.status is not AgentStatus.PENDING:
                return None
            mode = agent.mode
            if mode is AgentMode.AUTO:
                mode = (modes or {}).get(agent.model, mode)
            claimed = replace(agent, status=AgentStatus.RUNNING, attempt=agent.attempt + 1,
                              started_at=agent.started_at or now, heartbeat_at=now,
                              updated_at=now, task_id=task_id, mode=mode)
            self.agents[agent_id] = claimed
            return claimed

    def take_over(
        self, agent_id: uuid.UUID, *, attempt: int, stale_before: datetime,
        task_id: str | None = None, now: datetime | None = None,
    ) -> Agent | None:
        now = now or utcnow()
        with self.lock:
            agent = self.agents.get(agent_id)
            if (agent is None or agent.status is not AgentStatus.RUNNING or agent.attempt != attempt
                    or (agent.heartbeat_at is not None and agent.heartbeat_at >= stale_before)):
                return None
            taken = replace(agent, attempt=attempt + 1, heartbeat_at=now, updated_at=now,
                            task_id=task_id,
                            losses=agent.losses + (agent.heartbeat_at is not None))
            self.agents[agent_id] = taken
            return taken

    def release(self, agent_id: uuid.UUID, attempt: int) -> bool:
        with self.lock:
            agent = self.agents.get(agent_id)
            if agent is None or not _owned(agent, attempt):
                return False
            self.agents[agent_id] = replace(agent, heartbeat_at=None, updated_at=utcnow())
            return True

    def heartbeat(self, owned: Iterable[tuple[uuid.UUID, int]]) -> int:
        now, alive = utcnow(), 0
        with self.lock:
            for agent_id, attempt in owned:
                agent = self.agents.get(agent_id)
                if agent is not None and _owned(agent, attempt):
                    self.agents[agent_id] = replace(agent, heartbeat_at=now)
                    alive += 1
        return alive

    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None:
        with self.lock:
            agent = self.agents[agent_id]
            if _owned(agent, attempt):
                self.agents[agent_id] = replace(agent, mode=mode)

    def forget_task(self, agent_id: uuid.UUID) -> None:
        with self.lock:
            agent = self.agents.get(agent_id)
            if agent is not None and agent.status is AgentStatus.PENDING:
                self.agents[agent_id] = replace(agent, task_id=None)

    def requeue_pending(
        self, *, untouched_before: datetime, limit: int = 100
    ) -> list[tuple[uuid.UUID, str]]:
        def due(agent: Agent) -> bool:
            return agent.status is AgentStatus.PENDING and (
                agent.task_id is None or _updated(agent) < untouched_before)

        stamped = self._stamp(due, limit, task_id=lambda agent: agent.task_id or str(agent.id))
        return [(agent.id, agent.task_id or "") for agent in stamped]

    def requeue_stale_running(
        self, *, stale_before: datetime, handed_back_before: datetime | None = None,
        limit: int = 100,
    ) -> list[tuple[uuid.UUID, int, bool]]:
        handed_back_before = handed_back_before or stale_before

        def stale(agent: Agent) -> bool:
            if agent.status is not AgentStatus.RUNNING:
                return False
            if agent.heartbeat_at is None:
                return _updated(agent) < handed_back_before
            return agent.heartbeat_at < stale_before and _updated(agent) < stale_before

        return [(a.id, a.attempt, a.heartbeat_at is None) for a in self._stamp(stale, limit)]

    def _stamp(self, condition: Any, limit: int, **computed: Any) -> list[Agent]:
        """Stamp updated_at (and `computed` fields) on up to `limit` agents meeting
        `condition`, least recently updated first; the agents as stamped."""
        now = utcnow()
        with self.lock:
            chosen = sorted(filter(condition, self.agents.values()), key=_updated)[:limit]
            for agent in chosen:
                changes = {name: compute(agent) for name, compute in computed.items()}
                self.agents[agent.id] = replace(agent, updated_at=now, **changes)
            return [self.agents[agent.id] for agent in chosen]

    # --- steps ---------------------------------------------------------------------

    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None:
        with self.lock:
            agent = self.agents[agent_id]
            if not _owned(agent, attempt):
                raise StaleAttempt(f"agent {agent_id} is not RUNNING under attempt {attempt}")
            self._check_unique(agent_id, steps)
            self.steps[agent_id].extend(steps)
            self.agents[agent_id] = replace(agent, step_count=step_count, heartbeat_at=utcnow(),
                                            usage=_used(agent.usage, steps))

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]:
        return [s for s in self.steps.get(agent_id, []) if s.seq > seq]

    def agent_with_steps(self, agent_id: uuid.UUID, *, after: int = 0,
                         user_id: uuid.UUID | None = None) -> tuple[Agent | None, list[Step]]:
        agent = self.get(agent_id, user_id=user_id)
        return agent, (self.steps_after(agent_id, after) if agent is not None else [])

    def _check_unique(self, agent_id: uuid.UUID, steps: Sequence[Step]) -> None:
        """What the database's unique constraints refuse: a seq, or an iteration's row
        of a kind (and call), written twice."""
        existing = self.steps[agent_id]
        seqs = {s.seq for s in existing}
        kinds = {(s.step, s.type, s.call_id or "") for s in existing}
        for step in steps:
            if step.seq in seqs or (step.step, step.type, step.call_id or "") in kinds:
                raise AssertionError(f"duplicate step written: {step}")


def _owned(agent: Agent, attempt: int) -> bool:
    return agent.status is AgentStatus.RUNNING and agent.attempt == attempt


def _updated(agent: Agent) -> datetime:
    return agent.updated_at or agent.created_at


def _thread(agent: Agent) -> uuid.UUID:
    return agent.thread_id or agent.id


def _used(usage: Usage, steps: Sequence[Step]) -> Usage:
    """`usage` with the model calls whose tokens these rows carry."""
    for step in steps:
        if step.usage is not None:
            usage = usage + Usage(step.usage.input_tokens, step.usage.output_tokens, 1)
    return usage
