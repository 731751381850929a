"""Use cases the doors call: create, cancel, get, list, steps.

The API is a thin translation of HTTP into these calls; the worker side lives in
`runner.py`. Enqueueing is behind the Dispatcher protocol (`jarvis_agents.dispatch`)
so this module knows nothing of Celery.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol, runtime_checkable

from sqlalchemy.exc import IntegrityError

from jarvis_agents import approvals
from jarvis_agents.assistant_service import Assistants
from jarvis_agents.assistants import Overrides, default_assistant, gated_tools, new_agent
from jarvis_agents.config import Settings
from jarvis_agents.delegation import Delegation
from jarvis_agents.deleting import Deleting
from jarvis_agents.dispatch import Dispatcher
from jarvis_agents.errors import Conflict, DependencyUnavailable, NotFound, RequestError
from jarvis_agents.events import EventBus, Follower, Subscriber, follow
from jarvis_agents.events.follow import LentWriter
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, Step
from jarvis_agents.routing import queue_for
from jarvis_agents.schedule_service import Schedules
from jarvis_agents.schedules import TEMPLATE_FIELDS, Template
from jarvis_agents.store.interface import AgentStore
from jarvis_agents.store.threads import is_thread_taken
from jarvis_agents.threads import build_context, fork_points, nearest, turn_of

log = logging.getLogger(__name__)


@runtime_checkable
class ToolNames(Protocol):
    """The names a create may give in `tools` (the API's: MCP tools come and go)."""

    def names(self) -> list[str]: ...

    def canonical(self, name: str) -> str | None:
        """The name as the tool is listed, or None when there is no such tool."""


class FixedToolNames:
    """A set of names that does not change, matched ignoring case and spaces."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = {name.lower(): name for name in names}

    def names(self) -> list[str]:
        return list(self._names.values())

    def canonical(self, name: str) -> str | None:
        return self._names.get(name.strip().lower())


@dataclass(frozen=True)
class CreateRequest:
    """A validated create body (docs/api.md §2); the API has checked types and ranges."""

    goal: str
    max_steps: int | None = None
    model: str | None = None
    tools: tuple[str, ...] | None = None
    webhook_url: str | None = None
    approve_tools: tuple[str, ...] | None = None
    mode: str | None = None
    output_schema: dict[str, Any] | None = None
    thread_id: uuid.UUID | None = None
    # The id or name of the assistant whose configuration it takes (README, Assistants).
    assistant: str | None = None

    def fingerprint(self) -> str:
        """A stable hash of the body, to tell a repeat from a different request."""
        body = asdict(self)
        body["tools"] = list(self.tools) if self.tools is not None else None
        body["approve_tools"] = list(self.approve_tools) if self.approve_tools is not None else None
        if body["approve_tools"] is None:
            del body["approve_tools"]  # a body without it hashes as it did before approvals
        # Said only when given, so that a body without one hashes as it always has.
        thread_id = body.pop("thread_id")
        if thread_id is not None:
            body["thread_id"] = str(thread_id)
        if body["assistant"] is None:
            del body["assistant"]
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ForkRequest:
    """A validated fork body (docs/api.md §8): what differs from the original, if anything."""

    after_seq: int
    goal: str | None = None
    model: str | None = None
    max_steps: int | None = None
    mode: str | None = None


class AgentService:
    def __init__(
        self,
        *,
        repository: AgentStore,
        settings: Settings,
        dispatcher: Dispatcher,
        events: EventBus,
        tool_names: Sequence[str] | ToolNames,
        webhook_check: object | None = None,
        model_check: Callable[[str], None] | None = None,
    ) -> None:
        self.repository = repository
        self.settings = settings
        self.dispatcher = dispatcher
        self.events = events
        self.tool_names = tool_names if isinstance(tool_names, ToolNames) else FixedToolNames(tool_names)
        self.webhook_check = webhook_check
        # RequestError for a model its server says it does not have (llm/readiness.py).
        self.model_check = model_check
        self.assistants = Assistants(
            repository.assistants, settings=settings, known_tools=self._known_tools,
            remote_agents=lambda: [agent.name for agent in settings.a2a_agents])
        self.delegation = Delegation(repository=repository, settings=settings,
                                     dispatcher=dispatcher, events=events)
        self.schedules = Schedules(repository.schedules, settings=settings,
                                   prepare=self._scheduled)
        self.deleting = Deleting(repository)

    def create(
        self, user_id: uuid.UUID, request: CreateRequest, *, idempotency_key: str | None = None,
        traceparent: str | None = None, before_enqueue: Callable[[Agent], None] | None = None,
        agent_id: uuid.UUID | None = None, new_thread_id: uuid.UUID | None = None,
    ) -> tuple[Agent, bool]:
        """Create a PENDING agent and enqueue it; (agent, created) — False for a repeat.

        `traceparent` is the trace the agent joins (the create request's); None starts one.
        `before_enqueue` is called with a created agent before any worker can take it.
        `agent_id` is the id to give it (a run the LangGraph door announced before its
        turn); `new_thread_id` the id of the thread it starts, when not its own.
        """
        agent = self.prepare(user_id, request, idempotency_key=idempotency_key,
                             traceparent=traceparent)
        if agent_id is not None:
            agent = replace(agent, id=agent_id, thread_id=agent_id, task_id=str(agent_id))
        if new_thread_id is not None:
            agent = replace(agent, thread_id=new_thread_id)
        if request.thread_id is not None:
            agent = self._in_thread(agent, request.thread_id)
        try:
            agent, created = self.repository.create_agent(
                agent, max_active=self.settings.max_active_per_user
            )
        except IntegrityError as exc:
            if not is_thread_taken(exc):
                raise
            raise Conflict(
                f"another agent of thread {request.thread_id} was created at the same time; "
                "ask your follow-up once it has ended",
                code="thread_busy",
            ) from None
        if created:
            if before_enqueue is not None:
                before_enqueue(agent)
            self._announce_and_enqueue(agent)
        return agent, created

    def prepare(
        self, user_id: uuid.UUID, request: CreateRequest, *, idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> Agent:
        """The PENDING agent `request` makes, checked, not yet stored (a RequestError or
        NotFound saying what is wrong with it)."""
        # Without an assistant, the default one: known without a read (the hot path).
        assistant = (default_assistant(user_id) if request.assistant is None
                     else self.assistants.resolve(user_id, request.assistant))
        overrides = Overrides(
            model=request.model, max_steps=request.max_steps, mode=request.mode,
            tools=self._known_tools(request.tools),
            approve_tools=(gated_tools(request.approve_tools, self._known_tools)
                           if request.approve_tools is not None else None),
            output_schema=request.output_schema,
        )
        if request.webhook_url is not None and callable(self.webhook_check):
            self.webhook_check(request.webhook_url)
        agent = new_agent(
            user_id=user_id, goal=request.goal, assistant=assistant, settings=self.settings,
            overrides=overrides, webhook_url=request.webhook_url, idempotency_key=idempotency_key,
            request_hash=request.fingerprint() if idempotency_key else None,
            traceparent=traceparent,
        )
        if self.model_check is not None:
            self.model_check(agent.model)  # the assistant's, the create's or the default
        return replace(agent, task_id=str(agent.id))

    def _scheduled(self, user_id: uuid.UUID, goal: str, template: Template) -> Agent:
        """The agent a schedule's due time makes (README, Schedules), checked as a create."""
        fields = {name: getattr(template, name) for name in TEMPLATE_FIELDS}  # shallow: hot
        return self.prepare(user_id, CreateRequest(goal=goal, **fields))

    def as_follow_up(self, agent: Agent, thread_id: uuid.UUID) -> Agent:
        """`agent` as the next of its user's thread (a schedule's runs in one thread)."""
        return self._in_thread(agent, thread_id)

    def announce(self, agent: Agent) -> None:
        """Publish and queue an agent stored by another path than `create` (schedules)."""
        self._announce_and_enqueue(agent)

    def _known_tools(self, names: Sequence[str] | None) -> tuple[str, ...] | None:
        """The names as the tools are listed; a RequestError naming any unknown one."""
        if names is None:
            return None
        known = [(name, self.tool_names.canonical(name)) for name in names]
        unknown = [name for name, canonical in known if canonical is None]
        if unknown:
            raise RequestError(
                f"unknown tool(s): {', '.join(unknown)}; available tools: "
                f"{', '.join(sorted(self.tool_names.names()))}",
                code="unknown_tool",
            )
        return tuple(dict.fromkeys(canonical for _, canonical in known if canonical))

    def approve(
        self, user_id: uuid.UUID, agent_id: uuid.UUID, *, call_id: str, approve: bool,
        tool_input: str | None = None, reason: str | None = None,
    ) -> Agent:
        """Answer a WAITING agent's call (approvals.answer), then queue it to go on;
        RateLimited when the user already has their limit of agents active."""
        agent = approvals.answer(
            self.repository, self.get(user_id, agent_id), call_id=call_id, approve=approve,
            tool_input=tool_input, reason=reason, max_active=self.settings.max_active_per_user,
        )
        self._announce_and_enqueue(agent)
        return agent

    def _in_thread(self, agent: Agent, thread_id: uuid.UUID) -> Agent:
        """The agent as the next of its thread: its parent and what the thread's earlier
        agents give its model (jarvis_agents/threads.py). NotFound for an unknown or
        another user's thread; Conflict while an agent of it has not ended."""
        earlier = self.repository.agents_of_thread(agent.user_id, thread_id)
        if not earlier:
            raise NotFound(f"no thread with id {thread_id}", code="thread_not_found")
        busy = next((a for a in earlier if not a.is_terminal), None)
        # A repeat of the create that made the busy agent is answered with that agent.
        repeat = busy is not None and agent.idempotency_key is not None and (
            busy.idempotency_key == agent.idempotency_key)
        if busy is not None and not repeat:
            raise Conflict(
                f"agent {busy.id} of thread {thread_id} is still {busy.status.value}; ask your "
                "follow-up once it has ended (or cancel it)",
                code="thread_busy",
            )
        turns = [
            turn_of(a, () if a.status is AgentStatus.COMPLETED else self.repository.steps_after(a.id))
            for a in earlier if a.is_terminal
        ]
        context = build_context(turns, budget_chars=self.settings.context_chars)
        return replace(agent, thread_id=thread_id, parent_id=earlier[-1].id, context=context)

    def fork(self, user_id: uuid.UUID, agent_id: uuid.UUID, request: ForkRequest) -> Agent:
        """A new agent whose first steps are copies of the original's, up to
        `request.after_seq`, queued to go on from there as a resumed agent would."""
        original = self.get(user_id, agent_id)
        if not original.is_terminal:
            raise Conflict(
                f"agent {agent_id} is still {original.status.value}; fork it once it has ended",
                code="agent_not_ended",
            )
        steps = self.repository.steps_after(agent_id)
        points = fork_points(steps)
        if request.after_seq not in points:
            near = " or ".join(str(p) for p in nearest(points, request.after_seq))
            raise RequestError(
                f"`after_seq` {request.after_seq} is not the end of an iteration of agent "
                f"{agent_id}; the nearest valid values are {near} (0 starts over)",
                code="invalid_after_seq",
            )
        if request.model is not None and self.model_check is not None:
            self.model_check(request.model)
        copied = [s for s in steps if s.seq <= request.after_seq]
        iterations = len({s.step for s in copied})
        max_steps = request.max_steps or original.max_steps
        if max_steps <= iterations:
            raise RequestError(
                f"`max_steps` must be more than the {iterations} iterations copied, not {max_steps}",
                code="invalid_request",
            )
        agent = Agent.new(
            user_id=user_id, goal=request.goal or original.goal,
            model=request.model or original.model, max_steps=max_steps, tools=original.tools,
            approve_tools=original.approve_tools,
            output_schema=original.output_schema,
        )
        agent = replace(
            agent, task_id=str(agent.id), parent_id=original.id, forked_from_id=original.id,
            forked_from_seq=request.after_seq, context=original.context, step_count=iterations,
            assistant_id=original.assistant_id, assistant_version=original.assistant_version,
            instructions=original.instructions, delegates=original.delegates,
        )
        if request.mode is not None:  # validated at the door
            agent = replace(agent, mode=AgentMode(request.mode))
        self.repository.insert_fork(agent, copied, max_active=self.settings.max_active_per_user)
        self._announce_and_enqueue(agent)
        return agent

    def _announce_and_enqueue(self, agent: Agent) -> None:
        """Publish PENDING, then queue the agent.

        Only after the row is committed, so a fast worker always finds it; PENDING is
        published before the task is queued, so no RUNNING can overtake it. If the
        broker is down the agent stays PENDING with no task id, and a worker's
        sweeper enqueues it once the broker is back: nothing is lost.
        """
        self.events.publish_status(agent)
        try:
            self.dispatcher.enqueue(agent.id, task_id=agent.task_id or str(agent.id),
                                    queue=queue_for(agent.model))
        except DependencyUnavailable as exc:
            log.warning("agent %s stays queued for the sweeper: %s", agent.id, exc)
            self.repository.forget_task(agent.id)

    def get(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> Agent:
        agent = self.repository.get(agent_id, user_id=user_id)
        if agent is None:
            raise NotFound(f"no agent with id {agent_id}")
        return agent

    def follow(
        self, user_id: uuid.UUID, agent_id: uuid.UUID, *, subscriber: Subscriber, after: int,
        tick_s: float, writer: Callable[[], LentWriter | None] | None = None, tokens: bool = False,
    ) -> Follower:
        """Follow one of the user's agents (events.follow): its steps after `after`, then
        live ones, until it ends; NotFound for an unknown or another user's agent."""
        return follow(subscriber, self.repository, agent_id, after=after, user_id=user_id,
                      tick_s=tick_s, writer=writer, tokens=tokens)

    def list(
        self, user_id: uuid.UUID, *, status: AgentStatus | None, limit: int, cursor: str | None,
        thread_id: uuid.UUID | None = None, caller_id: uuid.UUID | None = None,
        schedule_id: uuid.UUID | None = None,
    ) -> tuple[list[Agent], str | None]:
        return self.repository.list_agents(
            user_id, status=status, limit=limit, cursor=cursor, thread_id=thread_id,
            caller_id=caller_id, schedule_id=schedule_id)

    def steps(self, user_id: uuid.UUID, agent_id: uuid.UUID, *, after: int = 0) -> list[Step]:
        self.get(user_id, agent_id)
        return self.repository.steps_after(agent_id, after)

    def cancel(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> Agent:
        """Cancel a PENDING, RUNNING or WAITING agent: the compare-and-set first (it owes the webhook,
        if any, in the same transaction), then the revoke."""
        while True:
            agent = self.get(user_id, agent_id)
            if agent.is_terminal:
                raise Conflict(
                    f"agent {agent_id} is already {agent.status.value} and cannot be cancelled",
                    code="agent_terminal",
                )
            cancelled = agent.with_cancelled()
            if self.repository.transition(
                agent_id, agent.status, cancelled.status,
                stop_reason=cancelled.stop_reason, completed_at=cancelled.completed_at,
                now=cancelled.updated_at, **self.delegation.cancel_values(agent, cancelled.updated_at),
            ):
                # As it ended: a step write the cancel waited for has added to its count.
                cancelled = self.repository.get(agent_id) or cancelled
                break
            # Lost a race (it started, or ended): look again.
        self.events.publish_cancel(agent_id)
        self.events.publish_status(cancelled)
        self.dispatcher.revoke([t for t in {str(agent_id), agent.task_id} if t])
        # Down the tree, then up: its remote task (a call of a remote delegate) and its
        # children are cancelled, its caller may go on.
        self.delegation.remote.cancelled(agent)
        self.delegation.cancel_children(agent_id)
        if agent.waits_on_agents:  # its usage_total now counts theirs
            cancelled = self.repository.get(agent_id) or cancelled
        self.delegation.child_ended(cancelled)
        return cancelled
