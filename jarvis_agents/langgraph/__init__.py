"""LangGraph's Agent Server API over our agents (README, LangGraph SDK): the use cases
the `/langgraph` door calls, and the queue a worker's sweep keeps moving.

- `requests`: the SDK's bodies read into ours;
- `messages`: a thread's agents as LangChain messages;
- `shapes`: assistants, threads, states and runs in LangGraph's JSON;
- `threads`, `runs`: the use cases; `stream`: a run's events in LangGraph's modes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from jarvis_agents.assistants import Assistant
from jarvis_agents.errors import NotFound
from jarvis_agents.events import IDLE, Ended, Follower, Subscriber, Waiting
from jarvis_agents.langgraph.messages import Conversation
from jarvis_agents.langgraph.runs import LangGraphRuns
from jarvis_agents.langgraph.shapes import GRAPH_ID, RunView, assistant_json
from jarvis_agents.langgraph.threads import LangGraphThreads
from jarvis_agents.service import AgentService
from jarvis_agents.store.langgraph import LangGraphStore

__all__ = ["LangGraph", "LangGraphRuns", "LangGraphThreads", "RunView"]


class LangGraph:
    """The use cases of one server."""

    def __init__(self, agents: AgentService, store: LangGraphStore) -> None:
        self.agents = agents
        self.threads = LangGraphThreads(agents, store)
        self.runs = LangGraphRuns(agents, store)

    # --- assistants ---------------------------------------------------------------------

    def assistant(self, user_id: uuid.UUID, ref: str) -> dict[str, Any]:
        try:
            return assistant_json(self.agents.assistants.resolve(user_id, ref))
        except NotFound:
            raise NotFound(f"no assistant {ref[:80]!r}", code="assistant_not_found") from None

    def search_assistants(self, user_id: uuid.UUID, body: dict[str, Any]) -> list[dict[str, Any]]:
        limit, offset = body.get("limit", 10), body.get("offset", 0)
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 1 or offset < 0:
            from jarvis_agents.errors import RequestError

            raise RequestError("`limit` must be 1 or more and `offset` 0 or more")
        found: list[Assistant] = self.agents.assistants.list(user_id)
        graph_id, name, metadata = body.get("graph_id"), body.get("name"), body.get("metadata")
        if graph_id not in (None, GRAPH_ID):
            found = []
        if isinstance(name, str) and name:
            found = [a for a in found if name.lower() in a.name.lower()]
        if isinstance(metadata, dict) and metadata:
            found = [a for a in found if all((a.config.metadata or {}).get(k) == v
                                             for k, v in metadata.items())]
        return [assistant_json(a) for a in found[offset:offset + limit]]

    # --- following a run ----------------------------------------------------------------

    def agent_of(self, user_id: uuid.UUID, view: RunView, *, still_wanted: Callable[[], bool],
                 tick_s: float) -> RunView | None:
        """The run once it has an agent: an enqueued run waits for its turn (looked at each
        tick, and started here if the thread is free); None when the wait was given up."""
        while view.agent is None and view.status == "pending":
            if not still_wanted():
                return None
            time.sleep(tick_s)
            self.runs.start_next(view.thread_id)
            view = self.runs.get(user_id, None, view.run_id)
        return view

    def follow(self, user_id: uuid.UUID, view: RunView, *, subscriber: Subscriber, tick_s: float,
               after: int = 0, tokens: bool = False) -> Follower:
        assert view.agent is not None
        return self.agents.follow(user_id, view.agent.id, subscriber=subscriber,
                                  after=max(after, view.after_seq), tick_s=tick_s, tokens=tokens)

    def conversation(self, user_id: uuid.UUID, view: RunView, *, after: int) -> Conversation:
        """The thread's messages before the run's agent tells its steps after `after`."""
        agents = self.threads.agents_of(user_id, view.thread_id)
        current = view.agent
        talk = self.threads.conversation([a for a in agents if current is None or (
            a.created_at, str(a.id)) < (current.created_at, str(current.id))])
        if current is not None:
            talk.goal(str(current.id), current.goal)
            for step in self.agents.repository.steps_after(current.id):
                if step.seq > max(after, view.after_seq):
                    break
                talk.step(step.to_json())
        return talk

    def settled(self, user_id: uuid.UUID, view: RunView, follower: Follower, *,
                still_wanted: Callable[[], bool]) -> RunView | None:
        """The run once its agent has ended or waits for an approval (the thread's next
        queued run then takes its turn); None when the wait was given up."""
        with follower:
            for told in follower:
                if isinstance(told, Ended | Waiting):
                    break
                if told is IDLE and not still_wanted():
                    return None
            else:
                return None
        self.ended(view)
        return self.runs.get(user_id, None, view.run_id)

    def ended(self, view: RunView) -> None:
        """A run ended or paused: the thread's next queued run may start now."""
        self.runs.start_next(view.thread_id)

    def values(self, user_id: uuid.UUID, view: RunView) -> dict[str, Any]:
        """What `runs.wait` and `runs.join` answer: the thread's values after the run."""
        state = self.threads.state(user_id, view.thread_id)
        values = dict(state["values"])
        if state["interrupts"]:
            values["__interrupt__"] = state["interrupts"]
        if view.status == "error" and view.agent is not None:
            values["__error__"] = {"error": "AgentFailed", "message": view.agent.error}
        return values
