"""Deleting what a user made (README, Deleting and retention): an ended agent, a thread,
or the user with everything they own.

Only ended agents are deleted; an active one is a Conflict (cancel it first). Deleted is
deleted: every read of the agent afterwards is a 404, and no stream replays it, since a
stream replays from the store (events.follow).
"""

from __future__ import annotations

import uuid

from jarvis_agents.errors import Conflict, NotFound
from jarvis_agents.retention import BATCH, Deleted
from jarvis_agents.store.interface import AgentStore


class Deleting:
    """The deletions the API and the command line ask for."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store

    def purge(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> Deleted:
        """Delete one of the user's ended agents with its steps, deliveries and events."""
        agent = self.store.get(agent_id, user_id=user_id)
        if agent is None:
            raise NotFound(f"no agent with id {agent_id}")
        if not agent.is_terminal:
            raise Conflict(
                f"agent {agent_id} is still {agent.status.value}; cancel it first "
                "(DELETE without ?purge=true), then delete it", code="agent_active")
        deleted = self.store.deletions.delete_ended([agent_id], user_id=user_id)
        if not deleted.agents:  # deleted meanwhile by another request or the sweep
            raise NotFound(f"no agent with id {agent_id}")
        return deleted

    def delete_thread(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> Deleted:
        """Delete every agent of one of the user's threads; a Conflict while one is active."""
        of_thread = self.store.agents_of_thread(user_id, thread_id)
        if not of_thread:
            raise NotFound(f"no thread with id {thread_id}", code="thread_not_found")
        busy = next((a for a in of_thread if not a.is_terminal), None)
        if busy is not None:
            raise Conflict(
                f"agent {busy.id} of thread {thread_id} is still {busy.status.value}; cancel "
                "it first, then delete the thread", code="thread_busy")
        ids = [a.id for a in of_thread]
        deleted = Deleted()
        for start in range(0, len(ids), BATCH):
            deleted += self.store.deletions.delete_ended(ids[start:start + BATCH], user_id=user_id)
        return deleted

    def delete_agents_of_user(self, user_id: uuid.UUID) -> Deleted:
        """Delete every ended agent of the user's, a batch at a time; Conflict (nothing
        deleted) while they have an agent that has not ended."""
        active = self.store.deletions.agents_of_user(user_id, ended=False, limit=BATCH)
        if active:
            raise Conflict(
                f"the user has {len(active)}{'+' if len(active) == BATCH else ''} agent(s) "
                f"pending, running or waiting (such as {active[0]}); cancel them first",
                code="user_has_active_agents")
        deleted = Deleted()
        while ids := self.store.deletions.agents_of_user(user_id, ended=True, limit=BATCH):
            batch = self.store.deletions.delete_ended(ids, user_id=user_id)
            if not batch.agents:
                break  # another deletion holds them; the user's own delete takes the rest
            deleted += batch
        return deleted
