"""Deletions in memory: store/deletion.py's twin, for unit tests and demos
(`MemoryStore().deletions`). The same rules: only ended agents are deleted, and with an
`ended_before`, only those no agent that has not ended by then depends on directly."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING

from jarvis_agents.lifecycle import Agent
from jarvis_agents.retention import Deleted, Links

if TYPE_CHECKING:
    from jarvis_agents.store.memory import MemoryStore


def links(agent: Agent) -> Links:
    return Links(agent.id, agent.created_at, agent.completed_at, agent.thread_id,
                 agent.caller_id, agent.forked_from_id)


class MemoryDeletions:
    """Deletions over a MemoryStore's dictionaries, under its lock."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def delete_ended(
        self, agent_ids: Collection[uuid.UUID], *, user_id: uuid.UUID | None = None,
        ended_before: datetime | None = None,
    ) -> Deleted:
        deleted = Deleted()
        with self.store.lock:
            for agent_id in agent_ids:
                agent = self.store.agents.get(agent_id)
                if (agent is None or agent.completed_at is None
                        or (user_id is not None and agent.user_id != user_id)
                        or (ended_before is not None and (agent.completed_at >= ended_before
                                                          or self._depended_on(agent, ended_before)))):
                    continue
                del self.store.agents[agent_id]
                rows = self.store.steps.pop(agent_id, [])
                deleted += Deleted(agents=1, steps=len(rows))
        return deleted

    def _depended_on(self, agent: Agent, ended_before: datetime) -> bool:
        thread = agent.thread_id or agent.id
        for other in self.store.agents.values():
            if other.completed_at is not None and other.completed_at < ended_before:
                continue
            if ((other.thread_id == thread and other.created_at > agent.created_at)
                    or other.caller_id == agent.id or other.id == agent.caller_id
                    or other.forked_from_id == agent.id):
                return True
        return False

    def ended_before(
        self, cutoff: datetime, *, after: tuple[datetime, uuid.UUID] | None, limit: int,
    ) -> list[Links]:
        ended = sorted(((a.completed_at, a.id, a) for a in list(self.store.agents.values())
                        if a.completed_at is not None and a.completed_at < cutoff),
                       key=lambda found: found[:2])
        return [links(a) for when, agent_id, a in ended
                if after is None or (when, agent_id) > after][:limit]

    def linked(self, ids: Collection[uuid.UUID], threads: Collection[uuid.UUID],
               callers: Collection[uuid.UUID]) -> list[Links]:
        return [links(a) for a in list(self.store.agents.values())
                if a.caller_id in ids or a.forked_from_id in ids or a.thread_id in threads
                or a.id in callers]

    def agents_of_user(self, user_id: uuid.UUID, *, ended: bool, limit: int) -> list[uuid.UUID]:
        return [a.id for a in list(self.store.agents.values())
                if a.user_id == user_id and (a.completed_at is not None) == ended][:limit]
