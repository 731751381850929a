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
from jarvis_agents.errors import NotFound, RequestError
from jarvis_agents.events import AGENT_CHANNEL, CLOSED, Follower, Message, Subscriber
from jarvis_agents.langgraph.messages import Conversation
from jarvis_agents.langgraph.runs import LangGraphRuns
from jarvis_agents.langgraph.shapes import GRAPH_ID, RunView, assistant_json, interrupts_of
from jarvis_agents.langgraph.threads import LangGraphThreads
from jarvis_agents.lifecycle import Agent, AgentStatus
from jarvis_agents.service import AgentService
from jarvis_agents.store.langgraph import LangGraphStore

__all__ = ["LangGraph", "LangGraphRuns", "LangGraphThreads", "RunView"]

SETTLED = {s.value for s in AgentStatus if s.is_terminal} | {AgentStatus.WAITING.value}


class LangGraph:
    """The use cases of one server."""

    def __init__(self, agents: AgentService, store: LangGraphStore) -> None:
        self.agents = agents
        self.threads = LangGraphThreads(agents, store)
        self.runs = LangGraphRuns(agents, store)

    @classmethod
    def of(cls, agents: AgentService) -> LangGraph:
        """The use cases over `agents`, keeping threads and queued runs in its database:
        the door and the worker ask for them here instead of reaching into the store."""
        return cls(agents, LangGraphStore(agents.repository.engine))

    # --- assistants ---------------------------------------------------------------------

    def assistant(self, user_id: uuid.UUID, ref: str) -> dict[str, Any]:
        try:
            return assistant_json(self.agents.assistants.resolve(user_id, ref))
        except NotFound:
            raise NotFound(f"no assistant {ref[:80]!r}", code="assistant_not_found") from None

    def search_assistants(self, user_id: uuid.UUID, body: dict[str, Any]) -> list[dict[str, Any]]:
        limit, offset = body.get("limit", 10), body.get("offset", 0)
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 1 or offset < 0:
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

    def settled(self, user_id: uuid.UUID, view: RunView, *, subscriber: Subscriber,
                still_wanted: Callable[[], bool], tick_s: float, recheck_s: float) -> Agent | None:
        """The run's agent once it has ended or waits for an approval (the thread's next
        queued run then takes its turn); None when the wait was given up.

        Woken by the agent's status messages, as REST's `?wait=` is: no step is read
        while it runs; the store is read again after such a status, and every
        `recheck_s` in case one was lost."""
        assert view.agent is not None
        agent_id = view.agent.id
        with subscriber.subscribe(AGENT_CHANNEL.format(agent_id)) as subscription:
            agent = self.agents.get(user_id, agent_id)
            next_read = time.monotonic() + recheck_s
            while not _settled(agent):
                item = subscription.get(tick_s)
                if item is CLOSED:
                    return None
                if isinstance(item, Message):
                    if item.kind != "status" or item.data.get("status") not in SETTLED:
                        continue
                elif not still_wanted():
                    return None
                elif time.monotonic() < next_read:
                    continue
                agent = self.agents.get(user_id, agent_id)
                next_read = time.monotonic() + recheck_s
        self.runs.start_next(view.thread_id)
        return agent

    def ended(self, view: RunView) -> None:
        """A run ended or paused: the thread's next queued run may start now."""
        self.runs.start_next(view.thread_id)

    def values(self, user_id: uuid.UUID, agent: Agent) -> dict[str, Any]:
        """What `runs.wait` and `runs.join` answer: the thread's values after the run's
        agent (its interrupt, or its error, said as LangGraph's server says them)."""
        # A thread's first agent has no parent: its own messages are the thread's.
        earlier = ([] if agent.parent_id is None else
                   [a for a in self.threads.agents_of(user_id, agent.thread_id or agent.id)
                    if (a.created_at, str(a.id)) < (agent.created_at, str(agent.id))])
        values: dict[str, Any] = {
            "messages": self.threads.conversation([*earlier, agent]).messages}
        interrupts = interrupts_of(agent)
        if interrupts:
            values["__interrupt__"] = interrupts
        if agent.status is AgentStatus.FAILED:
            values["__error__"] = {"error": "AgentFailed", "message": agent.error}
        return values


def _settled(agent: Agent) -> bool:
    # A caller waiting on the agents it called raises no interrupt: its run goes on.
    return agent.is_terminal or (agent.status is AgentStatus.WAITING and not agent.waits_on_agents)
