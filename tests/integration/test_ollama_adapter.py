"""OllamaChatModel against FakeOllama over real HTTP: streaming, interruption, failures."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import ollama
import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import (
    Cancelled,
    ModelError,
    ModelNotFound,
    ModelUnavailable,
    StepTimeout,
)
from jarvis_agents.llm.base import ChatMessage, StopSignal
from jarvis_agents.llm.ollama import OllamaChatModel
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama_scripts import CALC_PRODUCT

REPO = Path(__file__).resolve().parents[2]
CONVERSATION = [ChatMessage("system", "Answer in the ReACT format."), ChatMessage("user", "2+2?")]
REPLY = "THOUGHT: Easy.\nFINAL_ANSWER: 4"


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(responder=lambda request: REPLY) as server:
        yield server


@pytest.fixture
def model(fake: FakeOllama) -> Iterator[OllamaChatModel]:
    # Millisecond backoffs keep retry tests fast; the policy is the production one.
    with OllamaChatModel(host=fake.url, backoff_initial_s=0.01, backoff_max_s=0.05) as chat_model:
        yield chat_model


def ask(
    model: OllamaChatModel,
    *,
    name: str = "llama3.2",
    timeout_s: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    stop: tuple[str, ...] = ("OBSERVATION:",),
) -> str:
    return model.chat(
        CONVERSATION, model=name, stop=stop, deadline=time.monotonic() + timeout_s,
        should_stop=should_stop,
    )


def flips_after(seconds: float) -> Callable[[], bool]:
    at = time.monotonic() + seconds
    return lambda: time.monotonic() >= at


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


def test_stop_sequences_are_sent_and_honoured(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.responder = lambda request: "THOUGHT: t\nACTION: calculate\nINPUT: 2+2\nOBSERVATION: 5"
    assert ask(model, stop=("OBSERVATION:", "\nFINAL")) == "THOUGHT: t\nACTION: calculate\nINPUT: 2+2\n"
    assert fake.requests[0]["options"]["stop"] == ["OBSERVATION:", "\nFINAL"]


# --- interruption --------------------------------------------------------------------


def test_cancellation_mid_reply_is_prompt(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.responder = lambda request: " ".join(["word"] * 50)
    fake.chunk_delay_s = 0.1  # five seconds of reply in all
    started = time.monotonic()
    with pytest.raises(Cancelled):
        ask(model, should_stop=flips_after(0.3))
    assert time.monotonic() - started < 0.5


def test_a_silent_model_is_interruptible(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.latency_s = 10.0  # nothing at all, not even headers, for ten seconds
    started = time.monotonic()
    with pytest.raises(Cancelled):
        ask(model, should_stop=flips_after(0.3))
    assert time.monotonic() - started < 0.5


def test_a_stop_signal_wakes_a_silent_model_call_without_polling(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.latency_s = 10.0
    cancelled = threading.Event()
    looks: list[float] = []

    def condition() -> bool:
        looks.append(time.monotonic())
        return cancelled.is_set()

    signal = StopSignal(condition)  # poll_s=None: only wake() makes the call look again

    def cancel() -> None:
        cancelled.set()
        signal.wake()

    threading.Timer(0.5, cancel).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        ask(model, should_stop=signal)
    assert time.monotonic() - started < 0.7
    assert len(looks) <= 3  # once before the wait, once when woken: not ten times a second


def test_a_wake_cuts_a_silent_call_on_a_kept_alive_connection(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    assert ask(model) == REPLY  # the connection is open and pooled now
    fake.latency_s = 10.0
    cancelled = threading.Event()
    signal = StopSignal(cancelled.is_set, poll_s=None)

    def cancel() -> None:
        cancelled.set()
        signal.wake()

    threading.Timer(0.3, cancel).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        ask(model, should_stop=signal)
    assert time.monotonic() - started < 0.5
    fake.latency_s = 0.0
    assert ask(model) == REPLY  # the cut connection is replaced


def test_a_stop_signal_still_polls_what_cannot_wake_it(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.latency_s = 10.0
    started = time.monotonic()
    with pytest.raises(Cancelled):
        ask(model, should_stop=StopSignal(flips_after(0.3), poll_s=0.1))
    assert time.monotonic() - started < 0.5


def test_a_cancel_during_the_tls_handshake_is_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # The kernel takes the connection; nobody ever answers the TLS ClientHello.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host = f"https://127.0.0.1:{listener.getsockname()[1]}"
        with OllamaChatModel(host=host, retries=1, connect_timeout_s=3.0) as model:
            assert not model._proxied
            started = time.monotonic()
            with pytest.raises(Cancelled):
                ask(model, should_stop=flips_after(0.2))
            assert time.monotonic() - started < 0.5  # not the 3 s connect timeout


def test_a_step_deadline_ends_a_wait_no_signal_interrupts(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.latency_s = 10.0
    started = time.monotonic()
    with pytest.raises(StepTimeout):
        ask(model, timeout_s=0.3, should_stop=StopSignal(lambda: False))
    assert time.monotonic() - started < 0.5


def test_the_step_deadline_mid_reply_is_a_step_timeout(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.responder = lambda request: " ".join(["word"] * 50)
    fake.chunk_delay_s = 0.1
    started = time.monotonic()
    with pytest.raises(StepTimeout, match="step timeout"):
        ask(model, timeout_s=0.3)
    assert time.monotonic() - started < 0.5


def test_a_reply_that_stalls_after_a_token_times_out_at_the_step_deadline(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.responder = lambda request: "one two three"
    fake.chunk_delay_s = 0.5  # "two" at +0.5 s, "three" at +1.0 s
    started = time.monotonic()
    with pytest.raises(StepTimeout, match="step timeout"):
        ask(model, timeout_s=0.6)
    # The read after "two" waits what is left of the step, not the 0.6 s left at the start.
    assert time.monotonic() - started < 0.85


def test_a_late_cancel_of_one_call_does_not_cut_the_next_call_on_its_connection(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    # A wake-up looks at the condition outside any lock, so it can decide to cut A's
    # call after A's reply was read and its connection lent to B.
    b_reading = threading.Event()
    a_cut = threading.Event()

    def a_cancelled() -> bool:
        if threading.current_thread().name != "late-wake":
            return False
        b_reading.wait(5)  # A is cancelled only once B reads on A's connection
        a_cut.set()
        return True

    signal_a = StopSignal(a_cancelled)

    def respond(request: dict[str, object]) -> str:
        if request["model"] == "test-model":  # A's call: its cancellation is under way
            threading.Thread(target=signal_a.wake, name="late-wake").start()
            return "A"
        b_reading.set()
        return " ".join(["word"] * 5)

    fake.responder = respond
    fake.chunk_delay_s = 0.05
    assert ask(model, name="test-model", should_stop=signal_a) == "A"
    assert ask(model) == " ".join(["word"] * 5)
    assert a_cut.is_set()  # the late look did happen, and asked for A's cut
    assert fake.call_count == 2  # B's call was not cut and retried


# --- failures ------------------------------------------------------------------------


def test_calls_reuse_one_connection_and_read_on_the_callers_thread(
    fake: FakeOllama, model: OllamaChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects: list[object] = []
    connect = socket.socket.connect

    def counting(sock: socket.socket, address: object) -> None:
        connects.append(address)
        connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", counting)
    def others() -> set[str]:  # the client's threads, but the one polling plain should_stop()s
        return {t.name for t in threading.enumerate()
                if t.name != "ollama-watchdog" and "process_request" not in t.name}

    threads_before = others()
    for _ in range(5):
        assert ask(model) == REPLY
    # The reply is read to its end, so the connection goes back to the pool.
    assert len(connects) == 1
    assert others() == threads_before


def test_server_errors_are_retried(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.fail_next(2, status=500)
    assert ask(model) == REPLY
    assert fake.call_count == 3


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
    with OllamaChatModel(host=fake.url, backoff_initial_s=10.0) as model:
        started = time.monotonic()
        with pytest.raises(Cancelled):
            ask(model, should_stop=flips_after(0.2))
        assert time.monotonic() - started < 0.4
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
        assert (model.host, model.retries, model.read_timeout_s) == (fake.url, 5, 12.0)
        assert ask(model) == REPLY


# --- the fake itself -----------------------------------------------------------------


def test_the_fake_answers_the_plain_ollama_client(fake: FakeOllama) -> None:
    fake.responder = FakeOllama.by_turn(["first turn", "second turn"])
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
            second = model.chat(
                [*CONVERSATION, ChatMessage("assistant", first), ChatMessage("user", "1113068")],
                model="llama3.2", stop=[], deadline=time.monotonic() + 5, should_stop=lambda: False,
            )
    finally:
        process.terminate()
        process.wait(timeout=5)
        if process.stdout is not None:
            process.stdout.close()
    assert "ACTION: calculate\nINPUT: 1234*902" in first
    assert f"FINAL_ANSWER: 1234 * 902 = {CALC_PRODUCT}" in second
    assert process.returncode == 0


def test_a_cancelled_reply_leaves_no_read_behind_for_long(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.responder = lambda request: " ".join(["word"] * 50)
    fake.chunk_delay_s = 0.05
    started = time.monotonic()
    with pytest.raises(Cancelled):
        ask(model, should_stop=flips_after(0.1))
    assert time.monotonic() - started < 0.3  # the read was cut, not drained
    assert len(fake.requests) == 1
    fake.responder = lambda request: REPLY
    fake.chunk_delay_s = 0.0
    assert ask(model) == REPLY  # on a fresh connection
