"""Callers and children in memory: store/delegation.py's twin, for unit tests and demos
(`MemoryStore().delegation`), under the store's one lock."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, Usage

if TYPE_CHECKING:
    from jarvis_agents.store.memory import MemoryStore


class MemoryDelegation:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def children(self, caller_id: uuid.UUID) -> list[Agent]:
        with self.store.lock:
            found = [a for a in self.store.agents.values() if a.caller_id == caller_id]
        return sorted(found, key=lambda a: (a.created_at, a.id))

    def start(self, caller: Agent, *, children: Sequence[Agent], waiting_for: dict[str, Any],
              steps: Sequence[Step], now: datetime) -> bool:
        with self.store.lock:
            current = self.store.agents.get(caller.id)
            if (current is None or current.status is not AgentStatus.RUNNING
                    or current.attempt != caller.attempt):
                return False
            calls = {(a.caller_id, a.caller_call_id) for a in self.store.agents.values()}
            if any((c.caller_id, c.caller_call_id) in calls for c in children):
                return False
            for child in children:
                self.store.add(replace(child, thread_id=child.thread_id or child.id))
            return self.store.transition(caller.id, AgentStatus.RUNNING, AgentStatus.WAITING,
                                         attempt=caller.attempt, steps=steps,
                                         waiting_for=waiting_for, heartbeat_at=None, now=now)

    def ended_waits(self, *, limit: int = 100) -> list[Agent]:
        with self.store.lock:
            agents = list(self.store.agents.values())
        found = []
        for agent in agents:
            kids = [a for a in agents if a.caller_id == agent.id]
            if agent.status is AgentStatus.WAITING and kids and all(k.is_terminal for k in kids):
                found.append(agent)
        return found[:limit]

    def remote_due(self, *, polled_before: datetime, now: datetime, limit: int = 100) -> list[Agent]:
        return self._claim(lambda a: a.status is AgentStatus.WAITING
                           and (a.waiting_for or {}).get("kind") == "remote",
                           polled_before=polled_before, now=now, limit=limit)

    def cancels_due(self, *, cancelled_after: datetime, polled_before: datetime, now: datetime,
                    limit: int = 100) -> list[Agent]:
        return self._claim(lambda a: a.status is AgentStatus.CANCELLED
                           and a.completed_at is not None and a.completed_at >= cancelled_after
                           and (a.waiting_for or {}).get("cancel_owed") is True,
                           polled_before=polled_before, now=now, limit=limit)

    def owe_cancel(self, agent_id: uuid.UUID, waiting_for: dict[str, Any]) -> bool:
        return self._change_cancelled(agent_id, waiting_for=waiting_for)

    def _change_cancelled(self, agent_id: uuid.UUID, **changes: Any) -> bool:
        """Change a CANCELLED agent as the SQL store's UPDATE does; False for any other."""
        with self.store.lock:
            current = self.store.agents.get(agent_id)
            if current is None or current.status is not AgentStatus.CANCELLED:
                return False
            self.store.agents[agent_id] = replace(current, **changes)
            return True

    def _claim(self, where: Callable[[Agent], bool], *, polled_before: datetime, now: datetime,
               limit: int) -> list[Agent]:
        with self.store.lock:
            due = [a for a in self.store.agents.values() if where(a)
                   and (a.heartbeat_at is None or a.heartbeat_at < polled_before)]
            due.sort(key=lambda a: (a.heartbeat_at is not None, a.heartbeat_at or now))
            claimed = [replace(a, heartbeat_at=now) for a in due[:limit]]
            for agent in claimed:
                self.store.agents[agent.id] = agent
            return claimed

    def roll_up(self, agent_id: uuid.UUID, descendants: Usage) -> bool:
        return self._change_cancelled(agent_id, descendants_usage=descendants)

    def orphans(self, *, limit: int = 100) -> list[Agent]:
        with self.store.lock:
            agents = dict(self.store.agents)
        return [a for a in agents.values() if a.caller_id is not None and not a.is_terminal
                and (caller := agents.get(a.caller_id)) is not None
                and caller.status is AgentStatus.CANCELLED][:limit]
