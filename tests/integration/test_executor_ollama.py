"""The executor against real PostgreSQL and a server speaking Ollama's /api/chat."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus, StepType, StopReason
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.repository import Repository
from jarvis_agents.tools.registry import ToolRegistry
from tests.faults.conftest import CALC


@pytest.fixture
def parts(pg_url: str, fake_ollama: Any, tmp_path: Any) -> Iterator[tuple[Repository, Executor]]:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "DATABASE_URL": pg_url,
                                  "OLLAMA_HOST": fake_ollama.url})
    repository = repository_for(make_engine(pg_url))
    model = OllamaChatModel(host=fake_ollama.url, retries=3, backoff_initial_s=0.05, backoff_max_s=0.2)
    tools = ToolRegistry.default(settings)
    executor = Executor(store=repository, model=model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=5, total_timeout_s=30))
    yield repository, executor
    tools.close()
    model.close()
    repository.engine.dispose()


def started(repository: Repository, model: str = "test-model") -> Agent:
    user, _ = repository.users.create(f"exec-{uuid.uuid4().hex[:8]}")
    agent, _ = repository.create_agent(
        Agent.new(user_id=user.id, goal="What is 1234 * 902?", model=model, max_steps=5))
    claimed = repository.claim(agent.id)
    assert claimed is not None
    return claimed


def test_calculator_agent_completes(parts: tuple[Repository, Executor], fake_ollama: Any) -> None:
    repository, executor = parts
    fake_ollama.responder = fake_ollama.by_turn(CALC)
    done = executor.run(started(repository))
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert done.final_answer == "1113068"
    stored = repository.get(done.id)
    assert stored is not None and stored.status is AgentStatus.COMPLETED and stored.step_count == 3
    steps = repository.steps_after(done.id)
    assert [s.type for s in steps] == [StepType.THINK, StepType.ACT, StepType.OBSERVE] * 2 + [
        StepType.THINK, StepType.FINAL]
    assert steps[2].content == "1113068"
    assert all(r["stream"] is True for r in fake_ollama.requests)
    assert "\nOBSERVATION:" in fake_ollama.requests[0]["options"]["stop"]


def test_server_errors_are_retried(parts: tuple[Repository, Executor], fake_ollama: Any) -> None:
    repository, executor = parts
    fake_ollama.responder = fake_ollama.by_turn(CALC)
    fake_ollama.fail_next(2, status=500)
    done = executor.run(started(repository))
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert fake_ollama.call_count == 5  # two failures, then three answers


def test_unknown_model_fails_with_a_message_naming_it(parts: tuple[Repository, Executor],
                                                      fake_ollama: Any) -> None:
    repository, executor = parts
    done = executor.run(started(repository, model="no-such-model"))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.MODEL_ERROR and "no-such-model" in (done.error or "")
    # `auto` asks /api/show first, and its 404 is never retried.
    assert fake_ollama.shows == ["no-such-model"] and fake_ollama.call_count == 0
    assert repository.steps_after(done.id)[-1].type is StepType.ERROR


def test_unreachable_server_fails_after_retries(parts: tuple[Repository, Executor],
                                                fake_ollama: Any) -> None:
    repository, executor = parts
    fake_ollama.stop()
    done = executor.run(started(repository))
    assert done is not None and done.status is AgentStatus.FAILED
    assert done.stop_reason is StopReason.MODEL_ERROR and "after 3 attempts" in (done.error or "")


def test_text_the_database_cannot_hold_is_stored_with_a_replacement_character(
    parts: tuple[Repository, Executor], fake_ollama: Any
) -> None:
    """A NUL or a lone surrogate from the model (JSON can carry both) would make
    PostgreSQL refuse the step, and the agent would die with its worker's task."""
    repository, executor = parts
    fake_ollama.responder = fake_ollama.by_turn([
        "THOUGHT: a NUL \x00 here\nACTION: calculate\nINPUT: 6 * 7",
        "THOUGHT: and a lone \ud800 there\nFINAL_ANSWER: 42\x00",
    ])
    done = executor.run(started(repository))
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert done.final_answer == "42\ufffd"
    stored = repository.get(done.id)
    assert stored is not None and stored.final_answer == "42\ufffd"
    thoughts = [s.content for s in repository.steps_after(done.id) if s.type is StepType.THINK]
    assert thoughts == ["a NUL \ufffd here", "and a lone \ufffd there"]
