"""LangGraph's runs over our agents (README, LangGraph SDK): a run is an agent.

A run's id is its agent's, with two exceptions kept in `langgraph_runs`: a run enqueued
behind the thread's active one (`multitask_strategy` "enqueue") is announced with the id
its agent gets when its turn comes, and a run whose `command.resume` answers an interrupt
(our WAITING approval) goes on as the interrupted agent. A thread runs one agent at a
time (our threads' rule): "reject" answers 409 while one is active, "interrupt" cancels
it first, "enqueue" queues the run. A queued run takes its turn as soon as the thread
is free: started by the door that sees the active run end, or else by a worker's sweep
(`start_due`); no worker waits for it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import replace

from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import Conflict, NotFound, RateLimited, RequestError
from jarvis_agents.langgraph.requests import RunRequest
from jarvis_agents.langgraph.shapes import RUN_STATUS, RunView
from jarvis_agents.lifecycle import Agent, AgentStatus, new_agent_id, utcnow
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store.langgraph import CANCELLED, QUEUED, RESUME, LangGraphStore, RunRow

log = logging.getLogger(__name__)

KEY_PREFIX = "langgraph:"  # a queued run's create is keyed by its id: started once


class LangGraphRuns:
    def __init__(self, agents: AgentService, store: LangGraphStore) -> None:
        self.agents = agents
        self.store = store

    # --- create -------------------------------------------------------------------------

    def create(self, user_id: uuid.UUID, thread_id: uuid.UUID | None,
               request: RunRequest) -> RunView:
        """Start (or queue, or resume) a run on the thread; on a new thread without one."""
        if thread_id is not None and self.store.thread(user_id, thread_id) is None:
            if request.if_not_exists != "create":
                raise NotFound(f"no thread with id {thread_id}", code="thread_not_found")
            try:
                self.store.add_thread(user_id, thread_id, {})
            except IntegrityError:  # made meanwhile, or another user's
                if self.store.thread(user_id, thread_id) is None:
                    raise NotFound(f"no thread with id {thread_id}",
                                   code="thread_not_found") from None
        if request.approve is not None:
            if thread_id is None:
                raise RequestError("a `command.resume` answers an interrupt of a thread: "
                                   "create the run on that thread")
            return self._resume(user_id, thread_id, request)
        assert request.goal is not None
        if thread_id is not None:
            active = self._active(user_id, thread_id)
            if active is not None or self.store.runs_of_thread(thread_id, kind=QUEUED):
                if request.multitask_strategy == "enqueue":
                    return self._enqueue(user_id, thread_id, request)
                if request.multitask_strategy == "reject" or active is None:
                    raise Conflict(
                        f"thread {thread_id} has a run in progress; create this one with "
                        'multitask_strategy "enqueue" to run it next', code="thread_busy")
                with contextlib.suppress(Conflict):  # it may have ended meanwhile
                    self._cancel_agent(user_id, active)
        try:
            agent = self._start(user_id, thread_id, request.goal, request.assistant)
        except Conflict:
            if request.multitask_strategy != "enqueue" or thread_id is None:
                raise
            return self._enqueue(user_id, thread_id, request)  # another run took the thread first
        return RunView.of_agent(agent, metadata=request.metadata,
                                strategy=request.multitask_strategy)

    def _start(self, user_id: uuid.UUID, thread_id: uuid.UUID | None, goal: str,
               assistant: str, *, run_id: uuid.UUID | None = None) -> Agent:
        """The run's agent, created and queued: a follow-up in the thread, or its first."""
        earlier = self.agents.repository.agents_of_thread(user_id, thread_id) if thread_id else []
        create = CreateRequest(goal=goal, assistant=assistant,
                               thread_id=thread_id if earlier else None)
        key = f"{KEY_PREFIX}{run_id}" if run_id is not None else None
        agent, _ = self.agents.create(user_id, create, idempotency_key=key, agent_id=run_id,
                                      new_thread_id=thread_id if not earlier else None)
        return agent

    def _active(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> Agent | None:
        page, _ = self.agents.list(user_id, status=None, limit=1, cursor=None, thread_id=thread_id)
        return page[0] if page and not page[0].is_terminal else None

    def _enqueue(self, user_id: uuid.UUID, thread_id: uuid.UUID, request: RunRequest) -> RunView:
        self.agents.assistants.resolve(user_id, request.assistant)  # a 404 now, not at its turn
        # Its id becomes its agent's when its turn comes (`_start`).
        run = RunRow(id=new_agent_id(), user_id=user_id, thread_id=thread_id, kind=QUEUED,
                     created_at=utcnow(), goal=request.goal, assistant=request.assistant,
                     metadata=request.metadata, multitask_strategy=request.multitask_strategy)
        self.store.add_run(run)
        started = self.start_next(thread_id)  # the active run may have ended meanwhile
        if started is not None and started.id == run.id:
            return RunView.of_agent(started, metadata=run.metadata, strategy="enqueue")
        return self._queued_view(run)

    def _resume(self, user_id: uuid.UUID, thread_id: uuid.UUID, request: RunRequest) -> RunView:
        waiting = self._active(user_id, thread_id)
        call_id = ((waiting.waiting_for or {}).get("call_id")
                   if waiting is not None and waiting.status is AgentStatus.WAITING else None)
        if waiting is None or call_id is None:
            raise Conflict(f"thread {thread_id} has no interrupt to resume", code="not_interrupted")
        steps = self.agents.repository.steps_after(waiting.id)
        after_seq = steps[-1].seq if steps else 0
        agent = self.agents.approve(user_id, waiting.id, call_id=call_id,
                                    approve=bool(request.approve), reason=request.reason)
        run = RunRow(id=uuid.uuid4(), user_id=user_id, thread_id=thread_id, kind=RESUME,
                     created_at=utcnow(), agent_id=agent.id, metadata=request.metadata,
                     multitask_strategy=request.multitask_strategy, after_seq=after_seq)
        self.store.add_run(run)
        return self._chain(agent, [run])[-1]

    # --- the queue ----------------------------------------------------------------------

    def start_next(self, thread_id: uuid.UUID) -> Agent | None:
        """Start the thread's oldest queued run if the thread is free; its agent, or None."""
        queued = self.store.runs_of_thread(thread_id, kind=QUEUED)
        if not queued:
            return None
        run = queued[0]
        try:
            agent = self._start(run.user_id, thread_id, run.goal or "", run.assistant or "agent",
                                run_id=run.id)
        except (Conflict, RateLimited):
            return None  # not its turn yet, or its user's limit: a later look starts it
        except RequestError as exc:  # its assistant went away meanwhile: it cannot run
            log.warning("queued run %s cannot start: %s", run.id, exc)
            self.store.drop_run(run.id)
            return None
        self.store.started(run.id)
        return agent

    def start_due(self) -> int:
        """Start the queued runs whose threads are free (a worker's periodic duty)."""
        return sum(self.start_next(thread_id) is not None
                   for thread_id in self.store.queued_threads())

    # --- reading ------------------------------------------------------------------------

    def get(self, user_id: uuid.UUID, thread_id: uuid.UUID | None, run_id: uuid.UUID) -> RunView:
        run = self.store.run(user_id, run_id)
        agent_id = run.agent_id if run is not None else run_id
        agent = self.agents.repository.get(agent_id, user_id=user_id) if agent_id else None
        if run is not None and run.kind != RESUME:
            view = self._queued_view(run)
        elif agent is None:
            raise NotFound(f"no run with id {run_id}", code="run_not_found")
        else:
            resumes = [r for r in self.store.runs_of_thread(agent.thread_id or agent.id, kind=RESUME)
                       if r.agent_id == agent.id]
            view = next(v for v in self._chain(agent, resumes) if v.run_id == run_id)
        if thread_id is not None and view.thread_id != thread_id:
            raise NotFound(f"no run with id {run_id} in thread {thread_id}", code="run_not_found")
        return view

    def list(self, user_id: uuid.UUID, thread_id: uuid.UUID, *, limit: int, offset: int,
             status: str | None) -> list[RunView]:
        """The thread's runs, the newest first."""
        agents, _ = self.agents.list(user_id, status=None, limit=min(100, limit + offset),
                                     cursor=None, thread_id=thread_id)
        rows = [run for run in self.store.runs_of_thread(thread_id) if run.user_id == user_id]
        views = [self._queued_view(run) for run in rows if run.kind != RESUME]
        for agent in agents:
            views += self._chain(agent, [r for r in rows if r.kind == RESUME and r.agent_id == agent.id])
        views.sort(key=lambda v: v.created_at or utcnow(), reverse=True)
        if status is not None:
            views = [v for v in views if v.status == status]
        return views[offset:offset + limit]

    def _chain(self, agent: Agent, resumes: list[RunRow]) -> list[RunView]:
        """An agent's runs: the one that started it, then each that resumed it after an
        interrupt. All but the last stay interrupted, as LangGraph's server shows a run
        that an interrupt ended; the last has the agent's status."""
        views = [RunView.of_agent(agent)]
        for run in resumes:
            views.append(RunView.of_agent(agent, run_id=run.id, after_seq=run.after_seq,
                                          metadata=run.metadata, strategy=run.multitask_strategy))
            views[-1] = replace(views[-1], created_at=run.created_at)
        for at, later in enumerate(resumes):
            views[at] = replace(views[at], status="interrupted", updated_at=later.created_at)
        return views

    def _queued_view(self, run: RunRow) -> RunView:
        status = "interrupted" if run.kind == CANCELLED else "pending"
        return RunView(run.id, run.thread_id, run.assistant or "agent", status, run.created_at,
                       run.created_at, None, 0, run.metadata, run.multitask_strategy)

    # --- cancel -------------------------------------------------------------------------

    def cancel(self, user_id: uuid.UUID, thread_id: uuid.UUID, run_id: uuid.UUID) -> RunView:
        view = self.get(user_id, thread_id, run_id)
        if view.agent is None:
            if not self.store.drop_run(run_id):
                raise Conflict(f"run {run_id} has ended", code="run_ended")
            return self.get(user_id, thread_id, run_id)
        agent = self._cancel_agent(user_id, view.agent)
        self.start_next(thread_id)
        return RunView.of_agent(agent, run_id=view.run_id, after_seq=view.after_seq,
                                metadata=view.metadata, strategy=view.multitask_strategy)

    def _cancel_agent(self, user_id: uuid.UUID, agent: Agent) -> Agent:
        try:
            return self.agents.cancel(user_id, agent.id)
        except Conflict:
            raise Conflict(f"run {agent.id} has ended ({RUN_STATUS[agent.status]})",
                           code="run_ended") from None
