"""OllamaChatModel against servers speaking Ollama's protocol over real HTTP: the
request, the streamed reply, failures and retries, readiness.

How a call is cut short, connections and proxies: test_llm_streaming.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import ollama
import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ModelError, ModelNotFound, ModelUnavailable
from jarvis_agents.llm.base import ChatMessage, ChatRequest
from jarvis_agents.llm.ollama import OllamaChatModel
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama_scripts import CALC_PRODUCT
from tests.support.ollama_calls import CONVERSATION, REPLY, ask
from tests.support.raw_http import ndjson_reply, raw_server

pytest_plugins = ["tests.support.ollama_fixtures"]  # fake, model

REPO = Path(__file__).resolve().parents[2]


# --- replies -------------------------------------------------------------------------


def test_a_streamed_reply_is_assembled(fake: FakeOllama, model: OllamaChatModel) -> None:
    assert ask(model) == REPLY
    (request,) = fake.requests
    assert request["stream"] is True
    assert request["model"] == "llama3.2"
    assert request["messages"] == [
        {"role": "system", "content": "Answer in the ReACT format."},
        {"role": "user", "content": "2+2?"},
    ]


def test_one_line_longer_than_a_reply_may_be_is_not_read_whole() -> None:
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b'{"message": {"content": "' + b"x" * 65536
        try:
            for _ in range(160):  # 10 MB of one line, never ended
                conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        except OSError:
            pass  # the client hung up
        return False

    with raw_server(answer) as server, OllamaChatModel(host=server.url, retries=1,
                                                       max_reply_chars=1000) as model:
        assert ask(model, stop=()) == "\n\n[reply cut at 1000 characters]"


def test_stop_sequences_are_sent_and_honoured(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.responder = lambda request: "THOUGHT: t\nACTION: calculate\nINPUT: 2+2\nOBSERVATION: 5"
    assert ask(model, stop=("OBSERVATION:", "\nFINAL")) == "THOUGHT: t\nACTION: calculate\nINPUT: 2+2\n"
    assert fake.requests[0]["options"]["stop"] == ["OBSERVATION:", "\nFINAL"]


def test_lines_read_together_are_read_up_to_the_done_line_only() -> None:
    with raw_server(ndjson_reply(
        b'{"message":{"content":"THOUGHT: \\u00e9t\\u00e9"},"done":false}\n',
        b'{"message":{"content":" done"},"done":false}\n\n',
        b'{"message":{"content":""},"done":true}\n',
        b"not JSON: what follows the done line is not decoded\n",
    )) as server, OllamaChatModel(host=server.url, retries=1) as model:
        assert ask(model, stop=()) == "THOUGHT: été done"


def test_an_error_line_mid_reply_is_retried_then_unavailable() -> None:
    with raw_server(ndjson_reply(
        b'{"message":{"content":"THOUGHT:"},"done":false}\n',
        b'{"error":"the runner crashed"}\n',
    )) as server, OllamaChatModel(host=server.url, retries=2, backoff_initial_s=0.01) as model:
        with pytest.raises(ModelUnavailable, match="kept failing after 2 attempts: "
                                                   "the server failed mid-reply: the runner crashed"):
            ask(model)
        assert len(server.requests) == 2


# --- failures ------------------------------------------------------------------------


def test_server_errors_are_retried_on_the_same_connection(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.fail_next(2, status=500)
    assert ask(model) == REPLY
    assert fake.call_count == 3
    assert fake.connections == 1  # an error answer read whole leaves the connection open


def test_rate_limiting_is_retried(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.fail_next(1, status=429, message="server busy, please try again")
    assert ask(model) == REPLY
    assert fake.call_count == 2


def test_a_stream_cut_mid_reply_is_retried(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.drop_next(1, after_chunks=2)
    assert ask(model) == REPLY
    assert fake.call_count == 2


def test_persistent_server_errors_exhaust_the_retries(fake: FakeOllama) -> None:
    fake.fail_next(100, status=503, message="runner crashed")
    with (
        OllamaChatModel(host=fake.url, retries=4, backoff_initial_s=0.01) as model,
        pytest.raises(ModelUnavailable) as failure,
    ):
        ask(model)
    assert fake.call_count == 4
    assert str(failure.value) == (
        f"the Ollama server at {fake.url} kept failing after 4 attempts: HTTP 503: runner crashed"
    )


def test_a_server_that_is_down_is_unavailable_after_retries(fake: FakeOllama) -> None:
    fake.stop()
    with (
        OllamaChatModel(host=fake.url, backoff_initial_s=0.01) as model,
        pytest.raises(ModelUnavailable) as failure,
    ):
        ask(model)
    assert str(failure.value) == (
        f"could not reach the Ollama server at {fake.url} after 3 attempts: connection refused"
    )


def test_backoff_is_interruptible(fake: FakeOllama) -> None:
    fake.fail_next(100)
    # An hour's backoff within an hour's step: only the cancel ends the wait in time.
    with OllamaChatModel(host=fake.url, backoff_initial_s=3600.0, backoff_max_s=3600.0) as model, \
            pytest.raises(Cancelled):
        ask(model, timeout_s=3600.0, should_stop=lambda: fake.call_count >= 1)
    assert fake.call_count == 1


def test_the_server_coming_back_on_the_same_port_is_used(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    assert ask(model) == REPLY
    port = fake.port
    fake.stop()
    with pytest.raises(ModelUnavailable):
        ask(model)
    fake.start()
    assert fake.port == port
    assert ask(model) == REPLY


def test_an_unknown_model_is_not_retried(fake: FakeOllama, model: OllamaChatModel) -> None:
    with pytest.raises(ModelNotFound, match="ollama pull mistral"):
        ask(model, name="mistral")
    assert fake.call_count == 1


def test_a_bad_request_is_a_model_error_with_the_servers_words(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.fail_next(1, status=400, message="invalid options: stop must be a list")
    with pytest.raises(ModelError, match="HTTP 400.*stop must be a list") as failure:
        ask(model)
    assert not isinstance(failure.value, ModelUnavailable)
    assert fake.call_count == 1


# --- readiness -----------------------------------------------------------------------


def test_ping_lists_the_pulled_models(fake: FakeOllama, model: OllamaChatModel) -> None:
    assert model.ping() == {
        "reachable": True, "models": ["llama3.2:latest", "test-model:latest"], "error": None,
    }
    assert model.has_model("llama3.2")
    assert model.has_model("test-model:latest")
    assert not model.has_model("mistral")


def test_ping_reports_an_unreachable_server(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.stop()
    result = model.ping(timeout_s=0.5)
    assert result == {"reachable": False, "models": [], "error": "connection refused"}
    assert not model.has_model("llama3.2", timeout_s=0.5)


def test_from_settings_uses_host_retries_and_step_timeout(fake: FakeOllama) -> None:
    settings = Settings(database_url="sqlite://", redis_url=None, data_dir=Path("."),
                        ollama_host=fake.url, model_retries=5, step_timeout_s=12.0)
    with OllamaChatModel.from_settings(settings) as model:
        assert (model.host, model.retries.attempts, model.read_timeout_s) == (fake.url, 5, 12.0)
        assert ask(model) == REPLY


# --- the fake itself -----------------------------------------------------------------


def test_the_fake_answers_the_plain_ollama_client(fake: FakeOllama) -> None:
    fake.responder = FakeOllama.by_turn(["first turn", "second turn"])
    fake.capabilities = {"llama3.2:latest": ["completion", "tools"]}
    with ollama.Client(host=fake.url) as client:
        whole = client.chat(model="test-model", messages=[{"role": "user", "content": "hi"}])
        later = client.chat(model="test-model", stream=False, messages=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "first turn"},
        ])
        shown = client.show("llama3.2")
        with pytest.raises(ollama.ResponseError) as missing:
            client.chat(model="nope", messages=[])
    assert (whole.message.content, later.message.content) == ("first turn", "second turn")
    assert whole.done and whole.done_reason == "stop"
    assert shown.capabilities is not None and "tools" in shown.capabilities
    assert missing.value.status_code == 404
    assert missing.value.error == 'model "nope" not found, try pulling it first'


def test_the_fake_runs_as_a_process_with_a_builtin_script() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_ollama", "--port", "0", "--script", "calc"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        url = banner.split(" on ")[1].split()[0]
        with OllamaChatModel(host=url) as model:
            first = ask(model)
            second = model.complete(ChatRequest(
                [*CONVERSATION, ChatMessage("assistant", first), ChatMessage("user", "1113068")],
                model="llama3.2"), deadline=time.monotonic() + 5, should_stop=lambda: False,
            ).content
    finally:
        process.terminate()
        process.wait(timeout=5)
        if process.stdout is not None:
            process.stdout.close()
    assert "ACTION: calculate\nINPUT: 1234*902" in first
    assert f"FINAL_ANSWER: 1234 * 902 = {CALC_PRODUCT}" in second
    assert process.returncode == 0
