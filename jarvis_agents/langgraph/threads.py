"""LangGraph's threads over ours (README, LangGraph SDK): create, get, search, state and
history.

A thread of agents (one started by any agent, REST's included) is a LangGraph thread
with the same id; `threads.create` makes one before its first run. Its state's
`values.messages` are its agents' goals and steps as LangChain messages
(langgraph/messages.py); its history has a state after each of its agents.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import Conflict, NotFound, RequestError
from jarvis_agents.langgraph.messages import Conversation
from jarvis_agents.langgraph.shapes import (
    checkpoint_id_of,
    interrupts_of,
    state_json,
    thread_json,
    thread_status,
)
from jarvis_agents.lifecycle import Agent
from jarvis_agents.service import AgentService
from jarvis_agents.store.langgraph import QUEUED, LangGraphStore, ThreadRow

PAGE = 100
SCANNED = 1000  # threads a search by status looks at
THREAD_STATUSES = ("idle", "busy", "interrupted", "error")


class LangGraphThreads:
    def __init__(self, agents: AgentService, store: LangGraphStore) -> None:
        self.agents = agents
        self.store = store

    # --- reading ------------------------------------------------------------------------

    def row(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> ThreadRow:
        found = self.store.thread(user_id, thread_id)
        if found is None:
            raise NotFound(f"no thread with id {thread_id}", code="thread_not_found")
        return found

    def agents_of(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> list[Agent]:
        """The thread's agents, oldest first."""
        newest_first: list[Agent] = []
        cursor = None
        while True:
            page, cursor = self.agents.list(user_id, status=None, limit=PAGE, cursor=cursor,
                                            thread_id=thread_id)
            newest_first.extend(page)
            if cursor is None:
                return newest_first[::-1]

    def conversation(self, agents: list[Agent]) -> Conversation:
        talk = Conversation()
        for agent in agents:
            talk.goal(str(agent.id), agent.goal)
            for step in self.agents.repository.steps_after(agent.id):
                talk.step(step.to_json())
        return talk

    def get(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> dict[str, Any]:
        return self._json(user_id, self.row(user_id, thread_id))

    def _json(self, user_id: uuid.UUID, row: ThreadRow) -> dict[str, Any]:
        agents = self.agents_of(user_id, row.id)
        last = agents[-1] if agents else None
        messages = self.conversation(agents).messages
        return thread_json(row.id, created_at=row.created_at, updated_at=row.updated_at,
                           metadata=row.metadata, status=self._status(row.id, last),
                           values={"messages": messages} if agents else {},
                           interrupts=interrupts_of(last), last=last)

    def _status(self, thread_id: uuid.UUID, last: Agent | None) -> str:
        return thread_status(last, queued=bool(self.store.runs_of_thread(thread_id, kind=QUEUED)))

    def _last(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> Agent | None:
        page, _ = self.agents.list(user_id, status=None, limit=1, cursor=None, thread_id=thread_id)
        return page[0] if page else None

    def search(self, user_id: uuid.UUID, body: dict[str, Any]) -> list[dict[str, Any]]:
        limit, offset = _page(body)
        ids: list[uuid.UUID] | None = None
        if body.get("ids"):
            if not isinstance(body["ids"], list):
                raise RequestError("`ids` must be a list of thread ids")
            ids = [i for i in (_maybe_uuid(raw) for raw in body["ids"]) if i is not None]
        if body.get("metadata"):
            if not isinstance(body["metadata"], dict):
                raise RequestError("`metadata` must be an object")
            matching = self.store.with_metadata(user_id, body["metadata"])
            ids = matching if ids is None else [i for i in ids if i in set(matching)]
        status = body.get("status")
        if status is not None and status not in THREAD_STATUSES:
            raise RequestError(f"`status` must be one of {', '.join(THREAD_STATUSES)}")
        if status is None:
            rows = self.store.threads(user_id, ids=ids, limit=limit, offset=offset)
            return [self._json(user_id, row) for row in rows]
        # A status is known only once a thread's last agent is read: filter (the
        # SCANNED threads changed last), then page.
        rows = [row for row in self.store.threads(user_id, ids=ids, limit=SCANNED, offset=0)
                if self._status(row.id, self._last(user_id, row.id)) == status]
        return [self._json(user_id, row) for row in rows[offset:offset + limit]]

    def state(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> dict[str, Any]:
        self.row(user_id, thread_id)
        agents = self.agents_of(user_id, thread_id)
        last = agents[-1] if agents else None
        parent = checkpoint_id_of(agents[-2]) if len(agents) > 1 else None
        return state_json(thread_id, self.conversation(agents).messages, last=last, parent=parent)

    def history(self, user_id: uuid.UUID, thread_id: uuid.UUID,
                body: dict[str, Any]) -> list[dict[str, Any]]:
        """A state after each of the thread's agents, the newest first."""
        self.row(user_id, thread_id)
        limit, _ = _page(body, default=10)
        agents = self.agents_of(user_id, thread_id)
        talk = Conversation()
        states = []
        for at, agent in enumerate(agents):
            talk.goal(str(agent.id), agent.goal)
            for step in self.agents.repository.steps_after(agent.id):
                talk.step(step.to_json())
            parent = checkpoint_id_of(agents[at - 1]) if at else None
            states.append(state_json(thread_id, list(talk.messages), last=agent, parent=parent))
        states.reverse()
        before = body.get("before")
        if isinstance(before, dict):  # a checkpoint, or its id
            before = before.get("checkpoint_id")
        if before:
            ids = [s["checkpoint"]["checkpoint_id"] for s in states]
            states = states[ids.index(before) + 1:] if before in ids else []
        return states[:limit]

    # --- writing ------------------------------------------------------------------------

    def create(self, user_id: uuid.UUID, body: dict[str, Any]) -> dict[str, Any]:
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise RequestError("`metadata` must be an object")
        raw = body.get("thread_id")
        thread_id = uuid.uuid4() if raw is None else _maybe_uuid(raw)
        if thread_id is None:
            raise RequestError("`thread_id` must be a UUID")
        if raw is not None and self.store.thread(user_id, thread_id) is not None:
            if body.get("if_exists") == "do_nothing":
                return self.get(user_id, thread_id)
            raise Conflict(f"thread {thread_id} exists", code="thread_exists")
        try:
            row = self.store.add_thread(user_id, thread_id, metadata)
        except IntegrityError:  # another user's id, or a create racing this one
            raise Conflict(f"thread {thread_id} exists", code="thread_exists") from None
        return self._json(user_id, row)


def _maybe_uuid(raw: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        return None


def _page(body: dict[str, Any], *, default: int = 10) -> tuple[int, int]:
    limit, offset = body.get("limit", default), body.get("offset", 0)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise RequestError("`limit` must be an integer from 1 to 1000")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise RequestError("`offset` must be an integer of 0 or more")
    return limit, offset
