"""What every adapter returns, whatever its protocol: a reply put together from its
streamed pieces (llm/reply.py), tool calls with their arguments read or refused
(llm/base.py), and the model's name split into its provider (llm/router.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jarvis_agents.errors import ModelError
from jarvis_agents.llm.base import ToolCall
from jarvis_agents.llm.reply import ReplyBuilder
from jarvis_agents.llm.router import split_model
from jarvis_agents.react.prompt import STOP_SEQUENCES


def build(pieces: list[str], stop: tuple[str, ...] = STOP_SEQUENCES) -> tuple[str, list[str]]:
    deltas: list[str] = []
    reply = ReplyBuilder("m", stop=stop, on_delta=deltas.append)
    for piece in pieces:
        reply.text(piece)
    return reply.finish().content, deltas


def test_a_stop_sequence_split_over_pieces_ends_the_reply_and_is_never_handed_on() -> None:
    content, deltas = build(["THOUGHT: x", "\n", "OBSERV", "ATION: made up", " more"])
    assert content == "".join(deltas) == "THOUGHT: x"


def test_a_held_back_tail_that_turns_out_not_to_stop_is_handed_on() -> None:
    content, deltas = build(["a\n", "**bold", " text\n"])
    assert content == "".join(deltas) == "a\n**bold text\n"
    assert deltas[0] == "a"  # "\n" could have begun "\nOBSERVATION:"


@given(st.lists(st.sampled_from(["THOUGHT", ": ", "\n", "OBS", "ERVATION:", "**", "x y",
                                 "\nObservation:", "Obs"]), max_size=12))
def test_the_deltas_joined_are_the_text_cut_at_the_first_stop(pieces: list[str]) -> None:
    text = "".join(pieces)
    cuts = [i for i in (text.find(s) for s in STOP_SEQUENCES) if i >= 0]
    content, deltas = build(pieces)
    assert content == "".join(deltas) == (text[: min(cuts)] if cuts else text)


def test_a_reply_past_its_cap_is_cut_there_marked_and_full() -> None:
    deltas: list[str] = []
    reply = ReplyBuilder("m", stop=("\nOBSERVATION:",), on_delta=deltas.append, max_chars=10)
    reply.text("abcdefgh\n")
    assert not reply.full
    reply.text("\nOBS and more")
    assert reply.full and reply.room == 0
    reply.text("never taken")
    content = reply.finish().content
    assert content == "".join(deltas) == "abcdefgh\n\n\n\n[reply cut at 10 characters]"


def test_what_passes_the_cap_after_a_stop_sequence_leaves_the_text_whole() -> None:
    reply = ReplyBuilder("m", stop=("STOP",), max_chars=10)
    reply.text("done STOP")
    reply.text(" and a server that ignores stops goes on")
    assert reply.full and reply.finish().content == "done "


def test_reasoning_takes_from_the_same_cap() -> None:
    reply = ReplyBuilder("m", max_chars=6)
    reply.reasoning("think")
    reply.text("answer")
    done = reply.finish()
    assert (done.reasoning, done.content) == ("think", "a\n\n[reply cut at 6 characters]")


def test_reasoning_tool_calls_and_usage_come_back_whole() -> None:
    reply = ReplyBuilder("m")
    reply.reasoning("Think")
    reply.reasoning("ing.")
    reply.tool_call(ToolCall.from_value("getTime", {"zone": "UTC"}, id="c1"))
    done = reply.finish()
    assert (done.content, done.reasoning, done.usage) == ("", "Thinking.", None)
    assert done.as_message().tool_calls == done.tool_calls and done.as_message().role == "assistant"


@pytest.mark.parametrize(("text", "arguments", "error"), [
    ('{"city": "Paris"}', {"city": "Paris"}, None),
    ("", {}, None),
    ('{"city": ', None, "the arguments are not valid JSON: Expecting value: line 1 column 10 (char 9)"),
    ("[1]", None, "the arguments must be a JSON object, not list"),
    ('"Paris"', None, "the arguments must be a JSON object, not str"),
])
def test_arguments_as_text_are_read_or_refused(text: str, arguments: object, error: str | None) -> None:
    call = ToolCall.from_text("getWeather", text, id="c1")
    assert (call.id, call.arguments_text, call.arguments, call.error) == ("c1", text, arguments, error)


def test_arguments_as_a_value_are_read_or_refused() -> None:
    made = ToolCall.from_value("getTime", {"zone": "Europe/Paris"})
    assert made.id.startswith("call_") and made.arguments_text == '{"zone": "Europe/Paris"}'
    assert ToolCall.from_value("getTime", None).error == "the arguments must be a JSON object, not null"
    assert ToolCall.from_value("getTime", '{"zone": "UTC"}').arguments == {"zone": "UTC"}


@pytest.mark.parametrize(("name", "provider", "served"), [
    ("llama3.2", "ollama", "llama3.2"),
    ("llama3.2:3b", "ollama", "llama3.2:3b"),
    ("ollama/llama3.2", "ollama", "llama3.2"),
    ("openai/gpt-4o-mini", "openai", "gpt-4o-mini"),
    ("openai/Qwen/Qwen2.5-7B-Instruct", "openai", "Qwen/Qwen2.5-7B-Instruct"),
    ("library/llama3.2", "ollama", "library/llama3.2"),
    ("hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M", "ollama", "hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M"),
])
def test_a_models_first_segment_names_its_provider(name: str, provider: str, served: str) -> None:
    assert split_model(name) == (provider, served)


def test_a_name_without_prefix_is_the_default_providers() -> None:
    assert split_model("gpt-4o-mini", default_provider="openai") == ("openai", "gpt-4o-mini")
    assert split_model("Qwen/Qwen2.5", default_provider="openai") == ("ollama", "Qwen/Qwen2.5")
    with pytest.raises(ModelError):
        split_model("ollama/")
