"""An assistant's instructions reach its agents' model: in the system prompt, after the
contract text, marked as the assistant's, in both modes (README, Assistants)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvis_agents.assistants import INSTRUCTIONS_HEADING, AssistantConfig
from jarvis_agents.config import Settings
from jarvis_agents.dispatch import MemoryDispatcher
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.llm.base import ChatReply
from jarvis_agents.llm.scripted import ScriptedChatModel
from jarvis_agents.native.strategy import system_prompt
from jarvis_agents.react.prompt import render_system_prompt
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry

ME = uuid.uuid4()
INSTRUCTIONS = "Answer in French.\nNever guess a number."


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[ToolRegistry]:
    registry = ToolRegistry([CalculateTool()], settings=Settings.from_env(
        {"JARVIS_DATA_DIR": str(tmp_path)}))
    yield registry
    registry.close()


def run(tools: ToolRegistry, *, mode: str, assistant: str | None) -> list[str]:
    """Create an agent (of `assistant`) and run it; the system prompts its model was sent."""
    store = MemoryStore()
    service = AgentService(repository=store, settings=Settings.from_env({}),
                           dispatcher=MemoryDispatcher(), events=MemoryEventBus(),
                           tool_names=["calculate"])
    service.assistants.create(ME, "french", AssistantConfig(instructions=INSTRUCTIONS, mode=mode))
    agent, _ = service.create(ME, CreateRequest(goal="2 + 2?", assistant=assistant))
    reply = "THOUGHT: easy\nFINAL_ANSWER: quatre" if mode == "react" else "quatre"
    model = ScriptedChatModel([ChatReply(reply, "m")], tools=True)
    executor = Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=5, total_timeout_s=30))
    claimed = store.claim(agent.id)
    assert claimed is not None
    done = executor.run(claimed)
    assert done is not None and done.status is AgentStatus.COMPLETED
    return [request.messages[0].content for request in model.requests]


@pytest.mark.parametrize("mode", ["react", "native"])
def test_instructions_follow_the_contract_text_in_the_system_prompt(tools, mode) -> None:
    [prompt] = run(tools, mode=mode, assistant="french")
    contract = render_system_prompt(tools.listed()) if mode == "react" else system_prompt()
    assert prompt.startswith(contract.rstrip())
    assert prompt.endswith(f"\n\n{INSTRUCTIONS_HEADING}\n\n{INSTRUCTIONS}\n")


@pytest.mark.parametrize("mode", ["react", "native"])
def test_without_instructions_the_system_prompt_is_the_contract_alone(tools, mode) -> None:
    [prompt] = run(tools, mode=mode, assistant=None)
    assert INSTRUCTIONS_HEADING not in prompt and INSTRUCTIONS not in prompt
