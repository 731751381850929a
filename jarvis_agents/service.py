"""Use cases the doors call: create, cancel, get, list, steps.

The API is a thin translation of HTTP into these calls; the worker side lives in
`runner.py`. Enqueueing is behind the Dispatcher protocol so this module knows
nothing of Celery.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Protocol, runtime_checkable

from jarvis_agents.config import Settings
from jarvis_agents.errors import Conflict, DependencyUnavailable, NotFound, RequestError
from jarvis_agents.events import EventBus, QueuePush
from jarvis_agents.lifecycle import Agent, AgentStatus, Step
from jarvis_agents.routing import DEFAULT_QUEUE, queue_for
from jarvis_agents.store.repository import Repository

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    """Puts agents on the queue and pulls them off it (Celery in production)."""

    def enqueue(self, agent_id: uuid.UUID, *, task_id: str, queue: str = DEFAULT_QUEUE) -> None:
        """Queue a run of the agent on `queue` (`routing.queue_for(agent.model)`); raises
        DependencyUnavailable if the broker is down."""

    def queue_push(
        self, agent_id: uuid.UUID, *, task_id: str, queue: str = DEFAULT_QUEUE
    ) -> QueuePush | None:
        """The message `enqueue` would send, ready to LPUSH onto the broker's Redis (the
        event bus's: one REDIS_URL); None when the queue is not such a list."""

    def revoke(self, task_ids: Sequence[str]) -> None:
        """Tell workers to drop or stop these tasks (best effort)."""


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
    """A validated create body (CONTRACT §2); the API has checked types and ranges."""

    goal: str
    max_steps: int | None = None
    model: str | None = None
    tools: tuple[str, ...] | None = None
    webhook_url: str | None = None

    def fingerprint(self) -> str:
        """A stable hash of the body, to tell a repeat from a different request."""
        body = asdict(self)
        body["tools"] = list(self.tools) if self.tools is not None else None
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class AgentService:
    def __init__(
        self,
        *,
        repository: Repository,
        settings: Settings,
        dispatcher: Dispatcher,
        events: EventBus,
        tool_names: Sequence[str] | ToolNames,
        webhook_check: object | None = None,
    ) -> None:
        self.repository = repository
        self.settings = settings
        self.dispatcher = dispatcher
        self.events = events
        self.tool_names = tool_names if isinstance(tool_names, ToolNames) else FixedToolNames(tool_names)
        self.webhook_check = webhook_check

    def create(
        self, user_id: uuid.UUID, request: CreateRequest, *, idempotency_key: str | None = None
    ) -> tuple[Agent, bool]:
        """Create a PENDING agent and enqueue it; (agent, created) — False for a repeat."""
        tools = None
        if request.tools is not None:
            known = [(name, self.tool_names.canonical(name)) for name in request.tools]
            unknown = [name for name, canonical in known if canonical is None]
            if unknown:
                raise RequestError(
                    f"unknown tool(s): {', '.join(unknown)}; available tools: "
                    f"{', '.join(sorted(self.tool_names.names()))}",
                    code="unknown_tool",
                )
            tools = tuple(dict.fromkeys(canonical for _, canonical in known if canonical))
        if request.webhook_url is not None and callable(self.webhook_check):
            self.webhook_check(request.webhook_url)
        agent = Agent.new(
            user_id=user_id,
            goal=request.goal,
            model=request.model or self.settings.model,
            max_steps=request.max_steps or self.settings.max_steps,
            tools=tools,
            webhook_url=request.webhook_url,
            idempotency_key=idempotency_key,
            request_hash=request.fingerprint() if idempotency_key else None,
        )
        agent = replace(agent, task_id=str(agent.id))
        agent, created = self.repository.create_agent(
            agent, max_active=self.settings.max_active_per_user
        )
        if created:
            self._announce_and_enqueue(agent)
        return agent, created

    def _announce_and_enqueue(self, agent: Agent) -> None:
        """Publish PENDING and queue the agent, in one Redis round trip when possible.

        Only after the row is committed, so a fast worker always finds it; PENDING is
        published before the task is queued, so no RUNNING can overtake it. If the
        broker is down the agent stays PENDING with no task id, and a worker's
        sweeper enqueues it once the broker is back: nothing is lost.
        """
        task_id = agent.task_id or str(agent.id)
        queue = queue_for(agent.model)
        try:
            push = self.dispatcher.queue_push(agent.id, task_id=task_id, queue=queue)
            if push is not None:
                self.events.publish_status(agent, push=push)
            else:
                self.events.publish_status(agent)
                self.dispatcher.enqueue(agent.id, task_id=task_id, queue=queue)
        except DependencyUnavailable as exc:
            log.warning("agent %s stays queued for the sweeper: %s", agent.id, exc)
            self.repository.forget_task(agent.id)

    def get(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> Agent:
        agent = self.repository.get(agent_id, user_id=user_id)
        if agent is None:
            raise NotFound(f"no agent with id {agent_id}")
        return agent

    def list(
        self, user_id: uuid.UUID, *, status: AgentStatus | None, limit: int, cursor: str | None
    ) -> tuple[list[Agent], str | None]:
        return self.repository.list_agents(user_id, status=status, limit=limit, cursor=cursor)

    def steps(self, user_id: uuid.UUID, agent_id: uuid.UUID, *, after: int = 0) -> list[Step]:
        self.get(user_id, agent_id)
        return self.repository.steps_after(agent_id, after)

    def cancel(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> Agent:
        """Cancel a PENDING or RUNNING agent: the compare-and-set first (it owes the webhook,
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
                now=cancelled.updated_at,
            ):
                # As it ended: a step write the cancel waited for has added to its count.
                cancelled = self.repository.get(agent_id) or cancelled
                break
            # Lost a race (it started, or ended): look again.
        self.events.publish_cancel(agent_id)
        self.events.publish_status(cancelled)
        self.dispatcher.revoke([t for t in {str(agent_id), agent.task_id} if t])
        return cancelled
