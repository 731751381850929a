"""Native tool calling as a strategy (docs/api.md §5, last paragraph; §6).

The tools go to the model as functions with their JSON Schema; its tool calls come
back as ACT rows whose content is the arguments as the model wrote them and whose
call_id is the model's own id, each answered by an OBSERVE with the same call_id. A
reply's text beside its calls, or the model's reasoning, is a THINK; a reply without
calls is the FINAL. The conversation is rebuilt from those rows alone — the assistant
message (the THINK's text, reasoning included, and its tool calls), then one tool
message per call — so a resumed attempt sends the model exactly what the lost one
would have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from itertools import groupby

from jarvis_agents.answers import feedback, goal_with_schema
from jarvis_agents.assistants import with_instructions
from jarvis_agents.lifecycle import Agent, AgentMode, IterationRows, Step, StepType, storable
from jarvis_agents.llm.base import (
    ChatMessage,
    ChatReply,
    ChatRequest,
    ToolCall,
    ToolSpec,
    new_call_id,
)
from jarvis_agents.tools.arguments import ArgumentsError, check_arguments, example
from jarvis_agents.tools.registry import ToolRegistry, ToolResult

CALL_ID_MAX_CHARS = 100  # the column's width


@cache
def system_prompt() -> str:
    return resources.files("jarvis_agents.native").joinpath("system_prompt.txt").read_text("utf-8")


class NativeStrategy:
    """The `native` mode: the model's own tool calling."""

    mode = AgentMode.NATIVE

    def request(self, agent: Agent, tools: ToolRegistry, history: Sequence[Step]) -> ChatRequest:
        specs = [ToolSpec(tool.name, tool.description, tool.input_schema) for tool in tools.listed()]
        # The provider's structured output, where it leaves the tools usable (ChatRequest).
        last = max(history, key=lambda step: step.seq, default=None)
        return ChatRequest(build_messages(agent, history), model=agent.model, tools=specs,
                           output_schema=agent.output_schema,
                           answer_due=last is not None and last.type is StepType.ERROR)

    def rows(self, reply: ChatReply, made: IterationRows, *, tools: ToolRegistry) -> list[Step]:
        said = [part.strip() for part in (reply.reasoning, reply.content if reply.tool_calls else "")]
        if thought := "\n\n".join(part for part in said if part):
            made.add(StepType.THINK, storable(thought))
        if not reply.tool_calls:
            return made.add(StepType.FINAL, storable(reply.content.strip()))
        seen: set[str] = set()
        for call in reply.tool_calls:
            call_id = storable(call.id)[:CALL_ID_MAX_CHARS] or new_call_id()
            if call_id in seen:  # a model that repeats an id: each call must have its own
                call_id = new_call_id()
            seen.add(call_id)
            known = tools.get(call.name)
            name = known.name if known is not None else (call.name.strip()[:100] or "(none)")
            made.add(StepType.ACT, storable(call.arguments_text), tool=name, call_id=call_id)
        return made.rows

    def observe(self, tools: ToolRegistry, act: Step, *, idempotency_key: str,
                should_stop: Callable[[], bool]) -> ToolResult:
        started = time.perf_counter()
        tool = tools.get(act.tool or "")
        if tool is None:
            available = ", ".join(tools.names()) or "(none)"
            return _told(f"Unknown tool '{act.tool}'. Available tools: {available}. "
                         "Call one of these functions.", None, started)
        call = ToolCall.from_text(tool.name, act.content)
        if call.arguments is None:
            return _told(f"The call of '{tool.name}' was not run: {call.error}. Call it again "
                         f"with arguments like {example(tool.input_schema)}", tool.name, started)
        try:  # told in a function call's words, not the text contract's (registry.call)
            check_arguments(tool.name, tool.input_schema, call.arguments,
                            retry="Call it again with arguments like")
        except ArgumentsError as exc:
            return _told(str(exc), tool.name, started)
        return tools.call(tool.name, call.arguments, should_stop=should_stop,
                          idempotency_key=idempotency_key)


def _told(content: str, tool: str | None, started: float) -> ToolResult:
    """An observation that tells the model its call could not be made."""
    return ToolResult(content=content, ok=False, tool=tool,
                      duration_ms=int((time.perf_counter() - started) * 1000))


def build_messages(agent: Agent, history: Sequence[Step]) -> list[ChatMessage]:
    """System prompt (the assistant's instructions after it), the goal, then each complete
    earlier iteration, oldest first."""
    messages = [
        ChatMessage(role="system", content=with_instructions(system_prompt(), agent.instructions)),
        ChatMessage(role="user", content=goal_with_schema(agent.goal, agent.output_schema)),
    ]
    ordered = sorted(history, key=lambda step: (step.step, step.seq))
    for _, iteration in groupby(ordered, key=lambda step: step.step):
        messages.extend(_iteration_messages(list(iteration)))
    return messages


def _iteration_messages(steps: list[Step]) -> list[ChatMessage]:
    """One iteration's assistant message and what answered it, or [] if it is not whole.

    Whole means every ACT has its OBSERVE (an interrupted iteration is finished by
    running its calls, then replayed), or a FINAL was sent back with an ERROR.
    """
    thought = next((s.content for s in steps if s.type is StepType.THINK), "")
    final = next((s for s in steps if s.type is StepType.FINAL), None)
    if final is not None:
        refused = next((s for s in steps if s.type is StepType.ERROR and s.seq > final.seq), None)
        if refused is None:
            return []
        return [ChatMessage("assistant", final.content),
                ChatMessage("user", feedback(refused.content))]
    acts = [s for s in steps if s.type is StepType.ACT]
    results = {s.call_id: s.content for s in steps if s.type is StepType.OBSERVE}
    if not acts or any(act.call_id not in results for act in acts):
        return []
    calls = tuple(ToolCall.from_text(act.tool or "", act.content, id=act.call_id) for act in acts)
    return [
        ChatMessage("assistant", thought, tool_calls=calls),
        *(ChatMessage("tool", results[act.call_id], tool_call_id=act.call_id) for act in acts),
    ]
