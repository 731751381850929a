"""How an agent speaks to its model: one strategy per mode (docs/api.md §5, §6).

The executor runs the loop — limits, writes, events, resume — and asks a strategy
the three things that differ between the text contract and native tool calling: the
request for the next reply (rebuilt from the persisted steps alone, so that a resumed
attempt asks exactly what the lost one would have), the rows a reply stands for, and
the observation of one ACT. `auto` is settled here, once per agent, from what the
model's server says it can do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from jarvis_agents.errors import ModelError
from jarvis_agents.lifecycle import Agent, AgentMode, IterationRows, Step
from jarvis_agents.llm.base import ChatModel, ChatReply, ChatRequest
from jarvis_agents.native.strategy import NativeStrategy
from jarvis_agents.react.strategy import TextStrategy
from jarvis_agents.tools.registry import ToolRegistry, ToolResult


class Strategy(Protocol):
    """One mode's side of an iteration."""

    mode: AgentMode

    def request(self, agent: Agent, tools: ToolRegistry, history: Sequence[Step]) -> ChatRequest:
        """What to ask the model next, given every step persisted so far."""
        ...

    def rows(self, reply: ChatReply, made: IterationRows, *, tools: ToolRegistry) -> list[Step]:
        """The iteration's rows for `reply`, added to `made`: a THINK if any, then one
        ACT per tool call (each with its call_id) or one FINAL."""
        ...

    def observe(self, tools: ToolRegistry, act: Step, *, idempotency_key: str,
                should_stop: Callable[[], bool]) -> ToolResult:
        """Run the ACT's call, which carries `idempotency_key`; never raises for the
        call's own failures."""
        ...


class NoToolCalling(ModelError):
    """Raised when an agent asks for native tool calling of a model that has none."""


def settle(
    agent: Agent, model: ChatModel, *, deadline: float, should_stop: Callable[[], bool]
) -> AgentMode:
    """The mode `agent` runs in: its own, or for `auto` what its model supports.

    Raises NoToolCalling for `native` on a model whose server reports no tool calling,
    and what `capabilities` raises (ModelError, StepTimeout, Cancelled).
    """
    if agent.mode is AgentMode.REACT:
        return AgentMode.REACT
    found = model.capabilities(agent.model, deadline=deadline, should_stop=should_stop)
    if found.tools:
        return AgentMode.NATIVE
    if agent.mode is AgentMode.NATIVE:
        raise NoToolCalling(
            f"the model '{agent.model}' does not support native tool calling (its server "
            "reports no `tools` capability); create the agent with mode `auto`, which uses "
            "the text protocol for such a model, or `react`")
    return AgentMode.REACT


def strategy_for(mode: AgentMode) -> Strategy:
    return NativeStrategy() if mode is AgentMode.NATIVE else TextStrategy()
