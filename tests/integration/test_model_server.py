"""The test model server read by the real `ollama` and `openai` clients: what it sends
parses into their objects as a real server's replies do, so it cannot drift from them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import ollama
import openai
import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.fake_replies import FakeToolCall, Turn

WEATHER = {"type": "function", "function": {
    "name": "getWeather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TWO_CALLS = Turn(text="Let me look.", reasoning="Two cities.", usage=(31, 7), tool_calls=(
    FakeToolCall("getWeather", {"city": "Paris"}, id="call_1"),
    FakeToolCall("getWeather", {"city": "Tokyo"}),
))
USER = [{"role": "user", "content": "Weather in Paris and Tokyo?"}]


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(responder=lambda request: TWO_CALLS,
                    capabilities={"llama3.2": ["completion", "tools"],
                                  "test-model": ["completion"]}) as server:
        yield server


@pytest.fixture
def client(fake: FakeOllama) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{fake.url}/v1", api_key="test", max_retries=0) as made:
        yield made


# --- Ollama's own API ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_the_ollama_client_reads_tool_calls_thinking_and_counts(fake: FakeOllama, stream: bool) -> None:
    with ollama.Client(host=fake.url) as client:
        if stream:
            parts = list(client.chat(model="llama3.2", messages=USER, tools=[WEATHER], stream=True))
        else:
            parts = [client.chat(model="llama3.2", messages=USER, tools=[WEATHER])]
    calls = [call for part in parts for call in part.message.tool_calls or ()]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("getWeather", {"city": "Paris"}), ("getWeather", {"city": "Tokyo"})]
    assert "".join(part.message.content or "" for part in parts) == "Let me look."
    assert "".join(part.message.thinking or "" for part in parts) == "Two cities."
    done = parts[-1]
    assert done.done and (done.prompt_eval_count, done.eval_count) == (31, 7)
    assert fake.requests[-1]["tools"] == [WEATHER]


def test_the_ollama_client_reads_capabilities_per_model_and_the_listing(fake: FakeOllama) -> None:
    with ollama.Client(host=fake.url) as client:
        assert client.show("llama3.2").capabilities == ["completion", "tools"]
        assert client.show("test-model").capabilities == ["completion"]
        with pytest.raises(ollama.ResponseError) as missing:
            client.show("nope")
        listed = [m.model for m in client.list().models]
    assert missing.value.status_code == 404
    assert listed == ["llama3.2:latest", "test-model:latest"]
    assert fake.shows == ["llama3.2", "test-model", "nope"]


# --- the OpenAI API --------------------------------------------------------------------


def test_the_openai_client_assembles_streamed_tool_call_deltas_and_usage(
    fake: FakeOllama, client: openai.OpenAI
) -> None:
    chunks = list(client.chat.completions.create(
        model="llama3.2", messages=USER, tools=[WEATHER], stream=True,  # type: ignore[list-item]
        stream_options={"include_usage": True}))
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += delta.function.name or "" if delta.function else ""
                call["arguments"] += delta.function.arguments or "" if delta.function else ""
    arguments_pieces = sum(1 for c in chunks for ch in c.choices for d in ch.delta.tool_calls or ()
                           if d.function and d.function.arguments)
    assert arguments_pieces > 2  # the arguments arrive split over chunks
    assert calls[0]["id"] == "call_1" and calls[1]["id"].startswith("call_")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("getWeather", {"city": "Paris"}), ("getWeather", {"city": "Tokyo"})]
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    reasoning = "".join((ch.delta.model_extra or {}).get("reasoning_content", "")
                        for c in chunks for ch in c.choices)
    assert (text, reasoning) == ("Let me look.", "Two cities.")
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (31, 7)
    assert all(c.usage is None for c in chunks[:-1])


def test_the_openai_client_reads_a_whole_completion(fake: FakeOllama, client: openai.OpenAI) -> None:
    fake.responder = lambda request: Turn(text='{"answer": 42}', usage=(5, 3))
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    done = client.chat.completions.create(
        model="llama3.2", messages=USER, response_format=schema)  # type: ignore[arg-type]
    assert done.choices[0].message.content == '{"answer": 42}'
    assert done.choices[0].finish_reason == "stop" and done.model == "llama3.2"
    assert done.usage is not None and (done.usage.prompt_tokens, done.usage.completion_tokens) == (5, 3)
    assert fake.requests[-1]["response_format"] == schema
    assert fake.endpoints[-1] == "/v1/chat/completions"


def test_structured_output_beside_tools_as_the_real_clients_send_it(
    fake: FakeOllama, client: openai.OpenAI
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    with ollama.Client(host=fake.url) as native:
        parts = list(native.chat(model="llama3.2", messages=USER, tools=[WEATHER], format=schema,
                                 stream=True))
    assert [c.function.name for p in parts for c in p.message.tool_calls or ()] == ["getWeather"] * 2
    sent = fake.requests[-1]
    assert (sent["format"], sent["tools"]) == (schema, [WEATHER])
    wanted = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    chunks = list(client.chat.completions.create(
        model="llama3.2", messages=USER, tools=[WEATHER], response_format=wanted,  # type: ignore[arg-type]
        stream=True))
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]
    sent = fake.requests[-1]
    assert (sent["response_format"], sent["tools"]) == (wanted, [WEATHER])


def test_the_openai_client_reads_the_servers_errors_and_models(
    fake: FakeOllama, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=USER)  # type: ignore[arg-type]
    fake.fail_next(1, status=503, message="overloaded")
    with pytest.raises(openai.InternalServerError) as failing:
        client.chat.completions.create(model="llama3.2", messages=USER)  # type: ignore[arg-type]
    assert missing.value.code == "model_not_found" and "`nope`" in missing.value.message
    assert failing.value.status_code == 503 and failing.value.message.endswith("overloaded")
    assert isinstance(failing.value.body, dict) and failing.value.body["type"] == "server_error"
    assert [m.id for m in client.models.list().data] == ["llama3.2", "test-model"]


def test_stop_sequences_cut_the_reply_in_both_protocols(
    fake: FakeOllama, client: openai.OpenAI
) -> None:
    fake.responder = lambda request: "THOUGHT: go\nOBSERVATION: made up"
    done = client.chat.completions.create(
        model="llama3.2", messages=USER, stop=["\nOBSERVATION:"])  # type: ignore[arg-type]
    with ollama.Client(host=fake.url) as native:
        reply = native.chat(model="llama3.2", messages=USER, options={"stop": ["\nOBSERVATION:"]})
    assert done.choices[0].message.content == reply.message.content == "THOUGHT: go"
