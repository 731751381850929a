"""The system prompt and the conversation rebuilt from persisted steps."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from jarvis_agents.lifecycle import Step, StepType
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.react.parser import Action, parse_reply
from jarvis_agents.react.prompt import STOP_SEQUENCES, build_messages, render_system_prompt
from jarvis_agents.tools.base import RegisteredTool, ToolContext, mcp_source

GOAL = "What is 2 + 2, and what time is it in Tokyo?"
AT = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class FakeTool:
    name: str
    description: str
    input_hint: str

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        return tool_input


TEXT_TOOLS = [
    FakeTool("calculate", "Evaluates arithmetic without eval.", "an expression, e.g. 2 * (3 + 4)"),
    FakeTool("getTime", "Current time in a zone or city.", "an IANA zone such as Asia/Tokyo"),
    FakeTool("search", "Searches the web; costs ${price} {per} call.", "a query in plain words"),
]
TOOLS = [RegisteredTool.of(tool, source="builtin") for tool in TEXT_TOOLS]


@dataclass(frozen=True)
class SchemaTool:
    name: str
    description: str
    input_schema: dict
    source: str = mcp_source("srv")


def step(seq: int, number: int, type_: StepType, content: str, tool: str | None = None) -> Step:
    return Step(seq=seq, step=number, type=type_, content=content, tool=tool, created_at=AT)


def complete_history() -> list[Step]:
    return [
        step(1, 1, StepType.THINK, "I need to add."),
        step(2, 1, StepType.ACT, "2 + 2", tool="calculate"),
        step(3, 1, StepType.OBSERVE, "4"),
        step(4, 2, StepType.THINK, "Now the time.\nIn Tokyo."),
        step(5, 2, StepType.ACT, "Asia/Tokyo", tool="getTime"),
        step(6, 2, StepType.OBSERVE, "2024-01-01T09:00:00+09:00"),
    ]


def test_system_prompt_lists_every_tool() -> None:
    prompt = render_system_prompt(TOOLS)
    for tool in TEXT_TOOLS:
        assert tool.name in prompt
        assert tool.description in prompt
        assert f"Input: {tool.input_hint}\n" in prompt  # plain text is all it needs
    # Listed in the order given, so the prompt is stable for a given tool set.
    assert prompt.index("calculate") < prompt.index("getTime") < prompt.index("- search")


def test_a_tool_of_several_arguments_is_listed_with_the_json_it_takes() -> None:
    add = SchemaTool("srv__add", "Add two numbers.", {
        "type": "object",
        "properties": {"a": {"type": "integer", "description": "the first"},
                       "b": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["a", "b"],
    })
    prompt = render_system_prompt([*TOOLS, add])
    assert ('- srv__add: Add two numbers.\n  Input: a JSON object '
            '{"a": integer, "b": integer, "note"?: string}\n  Fields: a: the first\n') in prompt
    assert "write INPUT as that one JSON object" in prompt


def test_system_prompt_states_the_contract() -> None:
    prompt = render_system_prompt(TOOLS)
    for label in ("THOUGHT:", "ACTION:", "INPUT:", "FINAL_ANSWER:"):
        assert label in prompt
    assert "One action per reply" in prompt
    assert "Never write OBSERVATION yourself" in prompt
    assert "$tools" not in prompt


def test_system_prompt_without_tools_says_so() -> None:
    prompt = render_system_prompt([])
    assert "(none" in prompt
    assert "calculate" not in prompt


def test_stop_sequences_stop_a_hallucinated_observation() -> None:
    assert "\nOBSERVATION:" in STOP_SEQUENCES
    assert "\nObservation:" in STOP_SEQUENCES
    reply = "THOUGHT: t\nACTION: calculate\nINPUT: 1+1\nOBSERVATION: 2"
    assert any(stop in reply for stop in STOP_SEQUENCES)
    # A thought that only mentions the word mid-line is not cut off.
    assert not any(stop in "THOUGHT: the OBSERVATION: said 2" for stop in STOP_SEQUENCES)


def test_no_history_is_system_prompt_then_goal() -> None:
    assert build_messages(GOAL, TOOLS, []) == [
        ChatMessage(role="system", content=render_system_prompt(TOOLS)),
        ChatMessage(role="user", content=GOAL),
    ]


def test_history_is_reproduced_verbatim() -> None:
    messages = build_messages(GOAL, TOOLS, complete_history())
    assert messages[2:] == [
        ChatMessage(
            role="assistant",
            content="THOUGHT: I need to add.\nACTION: calculate\nINPUT: 2 + 2",
        ),
        ChatMessage(role="user", content="OBSERVATION: 4"),
        ChatMessage(
            role="assistant",
            content="THOUGHT: Now the time.\nIn Tokyo.\nACTION: getTime\nINPUT: Asia/Tokyo",
        ),
        ChatMessage(role="user", content="OBSERVATION: 2024-01-01T09:00:00+09:00"),
    ]


def test_replayed_reply_parses_back_to_the_same_action() -> None:
    history = [
        step(1, 1, StepType.THINK, "Search it."),
        step(2, 1, StepType.ACT, '{"query": "ACTION: in prompts"}\nline two', tool="search"),
        step(3, 1, StepType.OBSERVE, "results"),
    ]
    assistant = build_messages(GOAL, TOOLS, history)[2]
    assert parse_reply(assistant.content) == Action(
        "Search it.", "search", '{"query": "ACTION: in prompts"}\nline two'
    )


def test_error_step_is_shown_as_an_observation() -> None:
    history = [
        step(1, 1, StepType.THINK, "Divide."),
        step(2, 1, StepType.ACT, "1/0", tool="calculate"),
        step(3, 1, StepType.ERROR, "calculate failed: division by zero"),
    ]
    messages = build_messages(GOAL, TOOLS, history)
    assert messages[-1] == ChatMessage(
        role="user", content="OBSERVATION: calculate failed: division by zero"
    )


def test_interrupted_iterations_are_skipped() -> None:
    history = complete_history() + [
        step(7, 3, StepType.THINK, "Interrupted after thinking."),
    ]
    assert build_messages(GOAL, TOOLS, history) == build_messages(GOAL, TOOLS, complete_history())

    acted_but_unobserved = complete_history() + [
        step(7, 3, StepType.THINK, "Interrupted after acting."),
        step(8, 3, StepType.ACT, "Tokyo", tool="getWeather"),
    ]
    assert build_messages(GOAL, TOOLS, acted_but_unobserved) == build_messages(
        GOAL, TOOLS, complete_history()
    )


def test_an_interrupted_iteration_in_the_middle_is_skipped_alone() -> None:
    history = [
        step(1, 1, StepType.THINK, "Interrupted."),
        step(2, 2, StepType.THINK, "Again."),
        step(3, 2, StepType.ACT, "3*3", tool="calculate"),
        step(4, 2, StepType.OBSERVE, "9"),
    ]
    messages = build_messages(GOAL, TOOLS, history)
    assert [message.role for message in messages] == ["system", "user", "assistant", "user"]
    assert messages[2].content == "THOUGHT: Again.\nACTION: calculate\nINPUT: 3*3"


def test_final_steps_never_appear() -> None:
    history = complete_history() + [
        step(7, 3, StepType.THINK, "Done."),
        step(8, 3, StepType.FINAL, "4, and it is 9 am."),
    ]
    messages = build_messages(GOAL, TOOLS, history)
    assert messages == build_messages(GOAL, TOOLS, complete_history())
    assert all("9 am" not in message.content for message in messages)


def test_deterministic_whatever_the_order_of_steps() -> None:
    expected = build_messages(GOAL, TOOLS, complete_history())
    shuffled = complete_history()
    random.Random(7).shuffle(shuffled)
    assert build_messages(GOAL, TOOLS, shuffled) == expected
    assert build_messages(GOAL, TOOLS, tuple(complete_history())) == expected


def test_goal_with_labels_is_passed_unchanged() -> None:
    goal = "Explain this:\nACTION: search\nINPUT: $HOME {braces}"
    assert build_messages(goal, TOOLS, [])[1] == ChatMessage(role="user", content=goal)
