"""The conversation the planner sends the model: system prompt, goal, and history.

The contract text itself lives in `system_prompt.txt` beside this module, so a
reader can find and diff it in one place. `build_messages` rebuilds the whole
conversation from persisted steps alone: the executor calls it on every iteration,
including after a resume on another worker, and must get the same messages back.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from importlib import resources
from itertools import groupby
from string import Template
from typing import Any

from jarvis_agents.answers import feedback
from jarvis_agents.assistants import with_instructions
from jarvis_agents.lifecycle import Step, StepType
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.tools.arguments import example, text_parameter
from jarvis_agents.tools.base import ListedTool

__all__ = ["STOP_SEQUENCES", "build_messages", "render_system_prompt"]

# Stop the model before it writes an observation of its own. Only line-start forms
# are listed, matching the parser's rule that labels count only at a line start: a
# bare "OBSERVATION:" would also cut a thought that merely mentions the word. The
# bold and lowercase forms are habits of llama3/qwen/mistral.
STOP_SEQUENCES: tuple[str, ...] = (
    "\nOBSERVATION:",
    "\nObservation:",
    "\nobservation:",
    "\n**OBSERVATION",
    "\n**Observation",
)

_NO_TOOLS = "(none: answer from what you know, with THOUGHT and FINAL_ANSWER)"


@cache
def _template() -> Template:
    # string.Template rather than str.format: the prompt may show braces (JSON) freely.
    text = (
        resources.files("jarvis_agents.react")
        .joinpath("system_prompt.txt")
        .read_text(encoding="utf-8")
    )
    return Template(text)


def render_system_prompt(tools: Sequence[ListedTool]) -> str:
    """The system prompt with every tool's name, description and input, in order."""
    return _rendered(tuple((tool.name, tool.description, input_format(tool.input_schema))
                           for tool in tools))


def input_format(schema: dict[str, Any]) -> str:
    """How the prompt shows a tool's input, compactly.

    A tool of one string parameter is shown as that parameter's description, as plain
    text is all its INPUT needs (docs/api.md §7); any other as the JSON object it takes,
    with its fields' descriptions, if any, on the line after.
    """
    properties = schema.get("properties") or {}
    parameter = text_parameter(schema)
    if parameter is not None and len(properties) == 1:
        spec = properties[parameter] if isinstance(properties[parameter], dict) else {}
        return str(spec.get("description") or parameter).strip()
    notes = "; ".join(
        f"{name}: {' '.join(str(spec['description']).split())}"
        for name, spec in properties.items()
        if isinstance(spec, dict) and spec.get("description")
    )
    shown = f"a JSON object {example(schema)}"
    return f"{shown}\n  Fields: {notes}" if notes else shown


@lru_cache(maxsize=64)
def _rendered(tools: tuple[tuple[str, str, str], ...]) -> str:
    # Keyed on the text that goes into the prompt, so a tool whose description changes
    # gets a new prompt; an agent's iterations (and most agents) share one rendering.
    listing = (
        "\n".join(
            f"- {name}: {description.strip()}\n  Input: {shown}"
            for name, description, shown in tools
        )
        if tools
        else _NO_TOOLS
    )
    return _template().substitute(tools=listing).rstrip() + "\n"


def _iteration_messages(steps: Sequence[Step]) -> list[ChatMessage]:
    """The assistant turn and its observation for one iteration, or [] if it is not whole.

    An iteration is replayed only when it has an ACT and at least one OBSERVE or
    ERROR after it. A THINK alone, or a THINK and an ACT whose tool never reported,
    was interrupted: the executor plans that step again, so the model must not see
    a half of it. A FINAL step ends the run and is never replayed, unless an ERROR
    follows it: an answer refused for its output schema, replayed with the reason.
    """
    final = next((step for step in steps if step.type is StepType.FINAL), None)
    if final is not None:
        # A final answer sent back (output_schema): the answer, then why it was refused.
        refused = [step for step in steps if step.type is StepType.ERROR and step.seq > final.seq]
        if not refused:
            return []
        thought = "\n".join(step.content for step in steps if step.type is StepType.THINK)
        return [
            ChatMessage(role="assistant", content=f"THOUGHT: {thought}\nFINAL_ANSWER: {final.content}"),
            ChatMessage(role="user", content=feedback(refused[0].content)),
        ]
    act = next((step for step in steps if step.type is StepType.ACT), None)
    if act is None:
        return []
    observations = [
        step.content
        for step in steps
        if step.type in (StepType.OBSERVE, StepType.ERROR) and step.seq > act.seq
    ]
    if not observations:
        return []
    thought = "\n".join(step.content for step in steps if step.type is StepType.THINK)
    reply = f"THOUGHT: {thought}\nACTION: {act.tool or ''}\nINPUT: {act.content}"
    return [
        ChatMessage(role="assistant", content=reply),
        ChatMessage(role="user", content="OBSERVATION: " + "\n".join(observations)),
    ]


def build_messages(goal: str, tools: Sequence[ListedTool], history: Sequence[Step], *,
                   instructions: str | None = None) -> list[ChatMessage]:
    """System prompt (an assistant's `instructions` after it), the goal, then each
    complete earlier iteration, oldest first.

    Each replayed iteration is the assistant's reply exactly as the contract asks
    for it (`THOUGHT: …\\nACTION: …\\nINPUT: …`) followed by a user message
    `OBSERVATION: …`; an ERROR step counts as an observation. Steps are grouped by
    `step.step` and ordered by `seq`, so the result depends on the steps alone,
    not on the order they are passed in.
    """
    messages = [
        ChatMessage(role="system",
                    content=with_instructions(render_system_prompt(tools), instructions)),
        ChatMessage(role="user", content=goal),
    ]
    ordered = sorted(history, key=lambda step: (step.step, step.seq))
    for _, iteration in groupby(ordered, key=lambda step: step.step):
        messages.extend(_iteration_messages(list(iteration)))
    return messages
