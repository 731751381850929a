"""Agents that owe webhooks, and dispatchers to send them, for the outbox's tests
(tests/integration/test_webhook_*.py): real stores, a clock the test moves."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jarvis_agents.config import Settings
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.store.repository import Repository
from jarvis_agents.webhooks.dispatcher import WebhookDispatcher

SECRET = "s3cret"
NOWHERE = "http://127.0.0.1:9/hook"  # the discard port: nothing answers


class Clock:
    """A clock the test moves: the schedule's minutes pass at once."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now


def settings(**env: str) -> Settings:
    return Settings.from_env({"JARVIS_WEBHOOK_SECRET": SECRET, **env})


def agent_with(repository: Repository, url: str | None = NOWHERE, *,
               user_id: uuid.UUID | None = None) -> Agent:
    """A PENDING agent of `user_id` (of a new user if None) with that webhook_url."""
    if user_id is None:
        user_id = repository.users.create(f"u-{uuid.uuid4().hex[:8]}")[0].id
    agent, _ = repository.create_agent(
        Agent.new(user_id=user_id, goal="goal", model="m", max_steps=5, webhook_url=url))
    return agent


def running(repository: Repository, url: str | None = NOWHERE, *,
            user_id: uuid.UUID | None = None) -> Agent:
    claimed = repository.claim(agent_with(repository, url, user_id=user_id).id)
    assert claimed is not None
    return claimed


def complete(repository: Repository, agent: Agent) -> bool:
    """What the executor's completion writes: the FINAL row with the status, in one go."""
    final = Step(1, 0, StepType.FINAL, "42", created_at=utcnow())
    return repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=agent.attempt,
        steps=[final], final_answer="42", stop_reason=StopReason.FINAL_ANSWER, step_count=1)


def owed(repository: Repository, agent: Agent) -> list[dict[str, Any]]:
    return repository.outbox.of_agent(agent.id)


def dispatcher(repository: Repository, clock: Callable[[], datetime], **env: str) -> WebhookDispatcher:
    """This deployment's dispatcher on `repository`, on the clock, to loopback receivers."""
    found = WebhookDispatcher.from_settings(
        repository, settings(JARVIS_WEBHOOK_ALLOW_PRIVATE="1", **env))
    assert found is not None
    found.clock = clock
    return found
