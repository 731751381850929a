"""Both model adapters, Ollama's and the OpenAI-compatible one, against the test model
server: replies, tool calls, structured output, usage, live text, cancellation, the
deadline, retries and refusals behave the same whichever protocol carries them."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from jarvis_agents.errors import Cancelled, ModelError, ModelNotFound, StepTimeout
from jarvis_agents.llm.base import ChatMessage, ChatRequest, StopSignal, ToolCall
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_replies import FakeToolCall, Turn
from tests.support.model_calls import (
    CHAT_PATHS,
    USER,
    WEATHER,
    Adapter,
    adapter,
    reply_to,
)

pytest_plugins = ["tests.support.model_fixtures"]  # model_server, provider, chat_model

LONG = " ".join(f"word{i}" for i in range(40))
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def test_a_text_reply_comes_with_its_usage_and_its_deltas(
    model_server: FakeOllama, chat_model: Adapter, provider: str
) -> None:
    model_server.responder = lambda request: Turn(text=LONG, usage=(120, 40))
    # Pieces written apart arrive apart (what arrives in one read is handed on as one).
    model_server.chunk_delay_s = 0.002
    deltas: list[str] = []
    reply = reply_to(chat_model, deltas=deltas)
    assert reply.content == LONG and "".join(deltas) == LONG and len(deltas) > 10
    assert (reply.tool_calls, reply.reasoning, reply.model) == ((), "", "llama3.2")
    assert reply.usage is not None and (reply.usage.input_tokens, reply.usage.output_tokens) == (120, 40)
    assert model_server.endpoints == [CHAT_PATHS[provider]]


def test_one_tool_call_is_read_with_its_arguments(
    model_server: FakeOllama, chat_model: Adapter, provider: str
) -> None:
    model_server.responder = lambda request: Turn(
        tool_calls=[FakeToolCall("getWeather", {"city": "Paris"}, id="call_abc")])
    reply = reply_to(chat_model, ChatRequest([USER], model="llama3.2", tools=[WEATHER]))
    assert reply.tool_calls == (
        ToolCall("call_abc", "getWeather", '{"city":"Paris"}' if provider == "openai"
                 else '{"city": "Paris"}', {"city": "Paris"}),)
    sent = model_server.requests[-1]["tools"]
    assert sent == [{"type": "function", "function": {
        "name": "getWeather", "description": "Current weather for a city",
        "parameters": dict(WEATHER.parameters)}}]


def test_several_tool_calls_in_one_reply_keep_their_order_and_get_ids(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.responder = lambda request: Turn(text="Looking.", reasoning="Both cities.", tool_calls=[
        FakeToolCall("getWeather", {"city": "Paris"}), FakeToolCall("getWeather", {"city": "Tokyo"}),
        FakeToolCall("getTime", {"zone": "Asia/Tokyo", "nested": {"a": [1, 2]}})])
    reply = reply_to(chat_model, ChatRequest([USER], model="llama3.2", tools=[WEATHER], think=True))
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("getWeather", {"city": "Paris"}), ("getWeather", {"city": "Tokyo"}),
        ("getTime", {"zone": "Asia/Tokyo", "nested": {"a": [1, 2]}})]
    ids = [c.id for c in reply.tool_calls]
    assert len(set(ids)) == 3 and all(i.startswith("call_") for i in ids)  # made up where none came
    assert (reply.content, reply.reasoning) == ("Looking.", "Both cities.")


@pytest.mark.parametrize("provider", ["openai"])  # Ollama always sends a JSON object
def test_malformed_arguments_are_a_parse_error_on_the_call(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.responder = lambda request: Turn(tool_calls=[
        FakeToolCall("getWeather", '{"city": "Par'), FakeToolCall("getWeather", '["Paris"]'),
        FakeToolCall("getTime", "")])
    broken, listed, empty = reply_to(chat_model).tool_calls
    assert (broken.arguments, broken.arguments_text) == (None, '{"city": "Par')
    assert broken.error is not None and broken.error.startswith("the arguments are not valid JSON")
    assert listed.arguments is None and listed.error == "the arguments must be a JSON object, not list"
    assert (empty.arguments, empty.error) == ({}, None)


def test_structured_output_is_asked_in_the_providers_own_way(
    model_server: FakeOllama, chat_model: Adapter, provider: str
) -> None:
    model_server.responder = lambda request: '{"answer": 42}'
    reply = reply_to(chat_model, ChatRequest([USER], model="llama3.2", output_schema=SCHEMA))
    assert json.loads(reply.content) == {"answer": 42}
    sent = model_server.requests[-1]
    if provider == "ollama":
        assert sent["format"] == SCHEMA and "think" not in sent
    else:
        assert sent["response_format"] == {
            "type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
        assert sent["stream_options"] == {"include_usage": True}


def test_structured_output_beside_tools_where_the_provider_leaves_them_usable(
    model_server: FakeOllama, chat_model: Adapter, provider: str
) -> None:
    model_server.responder = lambda request: Turn(
        tool_calls=[FakeToolCall("getWeather", {"city": "Paris"})])
    asked = ChatRequest([USER], model="llama3.2", tools=[WEATHER], output_schema=SCHEMA)
    assert [c.name for c in reply_to(chat_model, asked).tool_calls] == ["getWeather"]
    model_server.responder = lambda request: '{"answer": 42}'
    reply_to(chat_model, replace(asked, answer_due=True))
    calling, answering = model_server.requests
    assert [t["function"]["name"] for t in calling["tools"]] == ["getWeather"] == [
        t["function"]["name"] for t in answering["tools"]]
    if provider == "ollama":  # `format` would hold the tool calls to the schema too
        assert "format" not in calling and answering["format"] == SCHEMA
    else:  # `response_format` holds the text alone: always
        expected = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
        assert calling["response_format"] == answering["response_format"] == expected


def test_a_conversation_with_tool_results_is_sent_whole(
    model_server: FakeOllama, chat_model: Adapter, provider: str
) -> None:
    call = ToolCall.from_value("getWeather", {"city": "Paris"}, id="call_1")
    messages = [USER, ChatMessage("assistant", "", tool_calls=(call,)),
                ChatMessage("tool", "18 °C, sunny", tool_call_id="call_1")]
    reply_to(chat_model, ChatRequest(messages, model="llama3.2", tools=[WEATHER]))
    assistant, tool = model_server.requests[-1]["messages"][1:]
    if provider == "ollama":
        assert assistant["tool_calls"] == [
            {"id": "call_1", "function": {"name": "getWeather", "arguments": {"city": "Paris"}}}]
        assert tool == {"role": "tool", "content": "18 °C, sunny", "tool_call_id": "call_1",
                        "tool_name": "getWeather"}
    else:
        assert assistant["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
            "name": "getWeather", "arguments": '{"city": "Paris"}'}}]
        assert tool == {"role": "tool", "content": "18 °C, sunny", "tool_call_id": "call_1"}


def test_stop_sequences_end_the_reply_and_its_deltas(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.responder = lambda request: "THOUGHT: a\nACTION: calculate\nOBSERVATION: 4"
    deltas: list[str] = []
    stops = ("\nOBSERVATION:", "\nObservation:", "\nobservation:", "\n**OBSERVATION", "\n**Obs")
    reply = reply_to(chat_model, ChatRequest([USER], model="llama3.2", stop=stops), deltas=deltas)
    assert reply.content == "".join(deltas) == "THOUGHT: a\nACTION: calculate"


# --- cut short -------------------------------------------------------------------------


def test_a_cancellation_mid_reply_hangs_up(model_server: FakeOllama, chat_model: Adapter) -> None:
    model_server.responder = lambda request: LONG
    model_server.chunk_delay_s = 0.1
    cancelled = threading.Event()
    signal = StopSignal(cancelled.is_set)
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)
        if len(deltas) == 3:  # the reply is being written: cancel it now
            cancelled.set()
            threading.Thread(target=signal.wake).start()

    with pytest.raises(Cancelled):
        chat_model.complete(ChatRequest([USER], model="llama3.2"), deadline=time.monotonic() + 30,
                            should_stop=signal, on_delta=on_delta)
    assert model_server.wait_for_hangups(1)
    assert 3 <= len(deltas) < len(LONG.split()) and LONG.startswith("".join(deltas))


def test_a_cancellation_before_the_first_byte_hangs_up(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.latency_s = 30.0  # a model loading: not even the response head comes
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    with pytest.raises(Cancelled):
        reply_to(chat_model, timeout_s=30.0, should_stop=cancelled.is_set)
    assert model_server.wait_for_hangups(1)


def test_the_deadline_mid_reply_is_a_step_timeout(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.responder = lambda request: LONG
    model_server.chunk_delay_s = 0.1
    deltas: list[str] = []
    with pytest.raises(StepTimeout):
        reply_to(chat_model, timeout_s=0.5, deltas=deltas)
    assert model_server.wait_for_hangups(1) and deltas


# --- what one reply may be ---------------------------------------------------------------

HUGE = ("x" * 999 + " ") * 10_000  # 10 MB in 10,000 pieces


def test_a_request_asks_for_at_most_the_reply_tokens(
    model_server: FakeOllama, provider: str
) -> None:
    with adapter(provider, model_server.url, max_reply_tokens=300) as model:
        reply_to(model)
    sent = model_server.requests[-1]
    asked = sent["options"]["num_predict"] if provider == "ollama" else sent["max_tokens"]
    assert asked == 300


def test_a_model_that_wants_max_completion_tokens_gets_it_from_then_on(
    model_server: FakeOllama
) -> None:
    # What OpenAI answers for its o-series models.
    model_server.fail_next(status=400, message="Unsupported parameter: 'max_tokens' is not "
                           "supported with this model. Use 'max_completion_tokens' instead.")
    with adapter("openai", model_server.url, max_reply_tokens=300) as model:
        assert reply_to(model).content == "Sunny in both."
        assert reply_to(model).content == "Sunny in both."
    asked = [{k: r.get(k) for k in ("max_tokens", "max_completion_tokens")}
             for r in model_server.requests]
    assert asked == [{"max_tokens": 300, "max_completion_tokens": None}] + [
        {"max_tokens": None, "max_completion_tokens": 300}] * 2


def test_a_reply_past_the_cap_is_cut_marked_and_read_no_further(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.responder = lambda request: HUGE
    # A moment between pieces, as a model has: the server looks for a hang-up then, and
    # cannot write the whole reply into the sockets' buffers before the client goes.
    model_server.chunk_delay_s = 0.001
    deltas: list[str] = []
    reply = reply_to(chat_model, timeout_s=30, deltas=deltas)
    assert reply.content == HUGE[:65536] + "\n\n[reply cut at 65536 characters]"
    assert "".join(deltas) == reply.content
    assert model_server.wait_for_hangups(1)  # the rest was never read


def test_reasoning_and_tool_calls_count_towards_the_cap(
    model_server: FakeOllama, provider: str
) -> None:
    small = FakeToolCall("getWeather", {"city": "Paris"}, id="c1")
    big = FakeToolCall("getWeather", {"city": "x" * 3000}, id="c2")
    model_server.responder = lambda request: Turn(reasoning="r" * 500, tool_calls=[small, big])
    with adapter(provider, model_server.url, max_reply_chars=1000) as model:
        reply = reply_to(model, ChatRequest([USER], model="llama3.2", tools=[WEATHER]))
    assert reply.reasoning == "r" * 500
    assert [call.id for call in reply.tool_calls] == ["c1"]  # the one that would pass it is dropped
    assert reply.content == "\n\n[reply cut at 1000 characters]"


# --- failures --------------------------------------------------------------------------


def test_a_stream_cut_short_is_retried_and_never_half_returned(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.responder = lambda request: LONG
    model_server.drop_next(2, after_chunks=4)
    deltas: list[str] = []
    reply = reply_to(chat_model, deltas=deltas)
    assert reply.content == LONG and model_server.call_count == 3
    assert "".join(deltas) == LONG  # the retries' repeated start is not handed on again


def test_a_retry_that_writes_another_reply_hands_on_no_more_text(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    other = LONG.replace("word2", "other2")  # a model that samples anew on the retry
    model_server.responder = lambda request: LONG if model_server.call_count == 1 else other
    model_server.drop_next(1, after_chunks=6)
    deltas: list[str] = []
    reply = reply_to(chat_model, deltas=deltas)
    assert reply.content == other and model_server.call_count == 2
    told = "".join(deltas)
    assert told and LONG.startswith(told) and "other2" not in told  # one start, never two spliced


def test_server_errors_and_rate_limits_are_retried(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.fail_next(1, status=503, message="overloaded")
    model_server.fail_next(1, status=429, message="slow down")
    assert reply_to(chat_model).content == "Sunny in both." and model_server.call_count == 3


def test_an_unknown_model_is_named_with_its_server_and_not_retried(
    model_server: FakeOllama, chat_model: Adapter, provider: str
) -> None:
    with pytest.raises(ModelNotFound) as missing:
        reply_to(chat_model, ChatRequest([USER], model="nope"))
    assert "'nope'" in str(missing.value) and model_server.call_count == 1
    if provider == "openai":
        assert f"OpenAI-compatible server at {model_server.url}/v1" in str(missing.value)
    else:
        assert "ollama pull nope" in str(missing.value)


def test_a_bad_request_is_a_model_error_with_the_servers_words(
    model_server: FakeOllama, chat_model: Adapter
) -> None:
    model_server.fail_next(1, status=400, message="tools are not supported by this model")
    with pytest.raises(ModelError, match="HTTP 400.*tools are not supported by this model"):
        reply_to(chat_model)
    assert model_server.call_count == 1


def test_a_server_that_is_down_is_unavailable_after_retries(
    model_server: FakeOllama, provider: str
) -> None:
    model_server.stop()
    with adapter(provider, model_server.url) as model, pytest.raises(ModelError) as down:
        reply_to(model)
    assert f"could not reach the {'Ollama' if provider == 'ollama' else 'OpenAI-compatible'} " \
           f"server at {model_server.url}" in str(down.value)
    assert "after 3 attempts: connection refused" in str(down.value)


def test_connections_are_kept_between_calls(model_server: FakeOllama, chat_model: Adapter) -> None:
    model_server.responder = lambda request: Turn(text=LONG, tool_calls=[
        FakeToolCall("getWeather", {"city": "Paris"})])
    for _ in range(3):
        assert reply_to(chat_model).content == LONG
    assert model_server.connections == 1
