"""Each mode on each provider: the executor against real PostgreSQL and the test model
server, spoken to through the real adapters (Ollama's /api/chat, the `openai` client)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, StepType, StopReason
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.repository import Repository
from jarvis_agents.tools.registry import ToolRegistry
from tests.faults.conftest import CALC
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_replies import FakeToolCall, Turn
from tests.support.model_calls import CHAT_PATHS, adapter

NATIVE = [
    Turn(reasoning="Two sums.", usage=(40, 12), tool_calls=(
        FakeToolCall("calculate", {"expression": "1234 * 902"}, id="call_a"),
        FakeToolCall("calculate", {"expression": "6 * 7"}))),
    Turn(text="1113068 and 42", usage=(60, 5)),
]
SCHEMA = {"type": "object", "properties": {"product": {"type": "integer"}}, "required": ["product"]}


@pytest.fixture
def server() -> Iterator[FakeOllama]:
    with FakeOllama(capabilities={"test-model": ["completion", "tools"]}) as made:
        yield made


@pytest.fixture
def repository(pg_url: str) -> Iterator[Repository]:
    made = repository_for(make_engine(pg_url))
    yield made
    made.engine.dispose()


def run(repository: Repository, server: FakeOllama, provider: str, tmp_path: Path, *,
        mode: AgentMode, tools: tuple[str, ...] | None = None,
        schema: dict[str, Any] | None = None) -> Agent:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    user, _ = repository.users.create(f"modes-{uuid.uuid4().hex[:8]}")
    agent, _ = repository.create_agent(Agent.new(
        user_id=user.id, goal="What is 1234 * 902?", model="test-model", max_steps=5,
        mode=mode, tools=tools, output_schema=schema))
    claimed = repository.claim(agent.id)
    assert claimed is not None
    with adapter(provider, server.url) as model, ToolRegistry.default(settings) as registry:
        executor = Executor(store=repository, model=model, tools=registry, events=MemoryEventBus(),
                            limits=Limits(step_timeout_s=5, total_timeout_s=30))
        done = executor.run(claimed)
    assert done is not None
    stored = repository.get(done.id)
    assert stored is not None and stored.usage == done.usage and stored.mode == done.mode
    return stored


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_native_mode_completes_with_paired_calls_and_usage(
    repository: Repository, server: FakeOllama, provider: str, tmp_path: Path
) -> None:
    server.responder = server.by_turn(NATIVE)
    done = run(repository, server, provider, tmp_path, mode=AgentMode.AUTO)
    assert done.status is AgentStatus.COMPLETED and done.final_answer == "1113068 and 42"
    assert done.mode is AgentMode.NATIVE
    assert done.usage.to_json() == {"input_tokens": 100, "output_tokens": 17, "model_calls": 2}
    steps = repository.steps_after(done.id)
    assert [s.type for s in steps] == [StepType.THINK, StepType.ACT, StepType.ACT,
                                       StepType.OBSERVE, StepType.OBSERVE, StepType.FINAL]
    acts, observes = steps[1:3], steps[3:5]
    assert [o.content for o in observes] == ["1113068", "42"]
    assert [a.call_id for a in acts] == [o.call_id for o in observes]
    if provider == "openai":  # the model's own id; Ollama sent none, so one was made
        assert acts[0].call_id == "call_a"
    assert steps[0].usage is not None and steps[0].usage.input_tokens == 40
    second = server.requests[1]
    assert server.endpoints == [CHAT_PATHS[provider]] * 2
    assert [t["function"]["name"] for t in second["tools"]] == ["calculate", "getTime",
                                                               "getWeather", "search"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in second["messages"][3:]] == [a.call_id for a in acts]


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_react_mode_speaks_the_text_protocol_to_a_tool_capable_model(
    repository: Repository, server: FakeOllama, provider: str, tmp_path: Path
) -> None:
    server.responder = server.by_turn(CALC)
    done = run(repository, server, provider, tmp_path, mode=AgentMode.REACT)
    assert done.status is AgentStatus.COMPLETED and done.final_answer == "1113068"
    assert done.mode is AgentMode.REACT and done.usage.model_calls == 3
    assert done.usage.input_tokens > 0 and done.usage.output_tokens > 0
    assert all("tools" not in r for r in server.requests) and server.shows == []
    pairs = [(s.type, s.call_id) for s in repository.steps_after(done.id)
             if s.type in (StepType.ACT, StepType.OBSERVE)]
    assert all(call_id for _, call_id in pairs) and pairs[0][1] == pairs[1][1] != pairs[2][1]


def test_native_on_a_model_without_tool_calling_fails_naming_the_other_modes(
    repository: Repository, server: FakeOllama, tmp_path: Path
) -> None:
    server.capabilities = {}
    done = run(repository, server, "ollama", tmp_path, mode=AgentMode.NATIVE)
    assert done.status is AgentStatus.FAILED and done.stop_reason is StopReason.MODEL_ERROR
    assert "`auto`" in (done.error or "") and "`react`" in (done.error or "")
    assert server.call_count == 0


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_typed_answer_is_sent_back_then_parsed(
    repository: Repository, server: FakeOllama, provider: str, tmp_path: Path
) -> None:
    server.responder = server.by_turn(['{"product": "big"}', '{"product": 1113068}'])
    done = run(repository, server, provider, tmp_path, mode=AgentMode.NATIVE, tools=(),
               schema=SCHEMA)
    assert done.status is AgentStatus.COMPLETED and done.output == {"product": 1113068}
    assert done.final_answer == '{"product": 1113068}'
    first, second = server.requests
    if provider == "ollama":
        assert first["format"] == SCHEMA
    else:
        assert first["response_format"]["json_schema"]["schema"] == SCHEMA
    assert "product" in second["messages"][-1]["content"]  # the validation error, sent back
    assert [s.type for s in repository.steps_after(done.id)] == [
        StepType.FINAL, StepType.ERROR, StepType.FINAL]


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_typed_answer_beside_tools_reaches_the_providers_structured_output(
    repository: Repository, server: FakeOllama, provider: str, tmp_path: Path
) -> None:
    server.responder = server.by_turn([
        Turn(tool_calls=(FakeToolCall("calculate", {"expression": "1234 * 902"}),)),
        '{"product": "big"}', '{"product": 1113068}'])
    done = run(repository, server, provider, tmp_path, mode=AgentMode.NATIVE, schema=SCHEMA)
    assert done.status is AgentStatus.COMPLETED and done.output == {"product": 1113068}
    assert len(server.requests) == 3 and all(r["tools"] for r in server.requests)
    if provider == "ollama":  # held to the schema once the answer is all it owes
        assert [r.get("format") for r in server.requests] == [None, None, SCHEMA]
    else:
        assert [r["response_format"]["json_schema"]["schema"] for r in server.requests] == [
            SCHEMA] * 3


def test_a_typed_answer_that_never_validates_fails_invalid_output(
    repository: Repository, server: FakeOllama, tmp_path: Path
) -> None:
    server.responder = lambda request: "not json"
    done = run(repository, server, "ollama", tmp_path, mode=AgentMode.AUTO, schema=SCHEMA)
    assert done.status is AgentStatus.FAILED and done.stop_reason is StopReason.INVALID_OUTPUT
    assert done.output is None and server.call_count == 3


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_stream_dropped_mid_reply_is_asked_again_and_never_half_kept(
    repository: Repository, server: FakeOllama, provider: str, tmp_path: Path
) -> None:
    server.responder = server.by_turn(NATIVE)
    server.drop_next(1, after_chunks=2)
    done = run(repository, server, provider, tmp_path, mode=AgentMode.NATIVE)
    assert done.status is AgentStatus.COMPLETED and done.final_answer == "1113068 and 42"
    assert server.call_count == 3  # the first reply twice: its stream was cut
    steps = repository.steps_after(done.id)
    assert [s.type for s in steps].count(StepType.ACT) == 2
    assert done.usage.model_calls == 2


@pytest.mark.parametrize("mode", [AgentMode.REACT, AgentMode.NATIVE])
@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_10_mb_reply_is_stored_cut_at_the_cap_and_marked(
    repository: Repository, server: FakeOllama, provider: str, mode: AgentMode, tmp_path: Path
) -> None:
    huge = ("x" * 999 + " ") * 10_000
    server.responder = lambda request: "FINAL_ANSWER: " + huge
    done = run(repository, server, provider, tmp_path, mode=mode)
    assert done.status is AgentStatus.COMPLETED
    (final,) = [s for s in repository.steps_after(done.id) if s.type is StepType.FINAL]
    assert final.content.endswith("x\n\n[reply cut at 65536 characters]")
    assert len(final.content) <= 65536 + len("\n\n[reply cut at 65536 characters]")
    assert done.final_answer == final.content
