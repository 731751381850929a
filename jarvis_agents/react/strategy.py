"""The text contract as a strategy (docs/api.md §5): THOUGHT/ACTION/INPUT in the reply's
text, the conversation rebuilt by `react.prompt`, the reply read by `react.parser`.

The model gives a call no id in this mode: the ACT gets one made here, and its
OBSERVE the same, so that steps pair alike in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jarvis_agents.answers import goal_with_schema
from jarvis_agents.lifecycle import Agent, AgentMode, IterationRows, Step, StepType, storable
from jarvis_agents.llm.base import ChatReply, ChatRequest, new_call_id
from jarvis_agents.react.parser import FinalAnswer, parse_reply
from jarvis_agents.react.prompt import STOP_SEQUENCES, build_messages
from jarvis_agents.tools.registry import ToolRegistry, ToolResult


class TextStrategy:
    """The `react` mode: any model, the text protocol."""

    mode = AgentMode.REACT

    def request(self, agent: Agent, tools: ToolRegistry, history: Sequence[Step]) -> ChatRequest:
        # The tools as they are now: an MCP server's may have come, gone or changed. The
        # output schema is in the goal only: the provider's structured output would
        # refuse the THOUGHT and FINAL_ANSWER lines the contract asks for.
        goal = goal_with_schema(agent.goal, agent.output_schema)
        messages = build_messages(goal, tools.listed(), history, instructions=agent.instructions)
        return ChatRequest(messages, model=agent.model, stop=STOP_SEQUENCES)

    def rows(self, reply: ChatReply, made: IterationRows, *, tools: ToolRegistry) -> list[Step]:
        plan = parse_reply(storable(reply.content))
        if plan.thought.strip():
            made.add(StepType.THINK, plan.thought)
        if isinstance(plan, FinalAnswer):
            return made.add(StepType.FINAL, plan.answer)
        known = tools.get(plan.tool)
        name = known.name if known is not None else (plan.tool.strip() or "(none)")
        return made.add(StepType.ACT, plan.tool_input, tool=name, call_id=new_call_id())

    def observe(self, tools: ToolRegistry, act: Step, *, idempotency_key: str,
                should_stop: Callable[[], bool]) -> ToolResult:
        return tools.call_text(act.tool or "", act.content, should_stop=should_stop,
                               idempotency_key=idempotency_key)
