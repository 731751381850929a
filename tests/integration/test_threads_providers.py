"""A follow-up's model sees its thread's earlier goals and answers, on either provider's
wire (docs/api.md §8, §6): the executor against both adapters and one test model server."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.threads import Turn, build_context
from jarvis_agents.tools.registry import ToolRegistry
from tests.support.fake_ollama import FakeOllama
from tests.support.model_calls import Adapter

pytest_plugins = ["tests.support.model_fixtures"]  # model_server, provider, chat_model


# What the model answers in each mode: the text contract's final answer, or a native
# reply without tool calls.
ANSWERS = {AgentMode.REACT: "THOUGHT: from the earlier answer\nFINAL_ANSWER: 68 °F",
           AgentMode.NATIVE: "68 °F"}


@pytest.mark.parametrize("mode", [AgentMode.REACT, AgentMode.NATIVE])
def test_the_threads_turns_reach_the_model_before_the_goal(
    chat_model: Adapter, model_server: FakeOllama, provider: str, tmp_path: Path, mode: AgentMode
) -> None:
    model_server.responder = lambda request: ANSWERS[mode]
    model_server.capabilities = {"llama3.2:latest": ["completion", "tools"]}
    context = build_context([Turn("What is 20 °C in Kelvin?", "293.15 K")], budget_chars=1000)
    agent = Agent.new(user_id=uuid.uuid4(), goal="And in Fahrenheit?", model="llama3.2", max_steps=3)
    store = MemoryStore()
    store.add(replace(agent, context=context, mode=mode).with_running(attempt=1))
    tools = ToolRegistry.default(Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}))
    executor = Executor(store=store, model=chat_model, tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=5, total_timeout_s=30))
    done = executor.run(store.agents[agent.id])
    tools.close()
    assert done is not None and done.status is AgentStatus.COMPLETED and done.final_answer == "68 °F"
    assert done.mode is mode
    (request,) = model_server.requests
    said = [(m["role"], m["content"]) for m in request["messages"] if m["role"] != "system"]
    assert said == [("user", "What is 20 °C in Kelvin?"), ("assistant", "293.15 K"),
                    ("user", "And in Fahrenheit?")], provider
