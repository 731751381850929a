"""How a model call goes over HTTP (llm/streaming.py), through the Ollama adapter against
real servers: cut short by a cancellation or the step deadline (and the server sees the
client go), kept-alive connections, environment proxies, a host with a path."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Callable

import pytest

from jarvis_agents.errors import Cancelled, ModelError, ModelUnavailable, StepTimeout
from jarvis_agents.llm.base import StopSignal
from jarvis_agents.llm.ollama import OllamaChatModel
from tests.support.api_server import wait_until
from tests.support.fake_ollama import FakeOllama
from tests.support.ollama_calls import REPLY, ask
from tests.support.raw_http import ndjson_reply, raw_server

pytest_plugins = ["tests.support.ollama_fixtures"]  # fake, model, no_proxy_settings

LONG_REPLY = " ".join(["word"] * 50)
HI = b'{"message":{"content":"hi"},"done":true}\n'
# A wait nothing in these tests sits out (a model's silence, a pause between its words,
# the step budget of a call a cancel must cut): only the cut under test ends the call
# within the test's time (pytest's per-test timeout fails the test that waits on).
HOUR = 3600.0


def cancel_when(reached: Callable[[], bool]) -> StopSignal:
    """A cancellation that wakes the call, as the runner's does, once `reached()` holds."""
    cancelled = threading.Event()
    signal = StopSignal(cancelled.is_set)  # poll_s=None: only wake() makes the call look

    def cancel() -> None:
        wait_until(reached, timeout_s=60, interval_s=0.01)
        cancelled.set()
        signal.wake()

    threading.Thread(target=cancel, daemon=True).start()
    return signal


# --- cut short -----------------------------------------------------------------------


def test_a_cancel_mid_reply_hangs_up_on_the_model(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.responder = lambda request: LONG_REPLY
    fake.chunk_delay_s = HOUR  # the first word at once, the next an hour later
    with pytest.raises(Cancelled):
        ask(model, timeout_s=HOUR, should_stop=cancel_when(lambda: fake.chunks >= 1))
    assert fake.wait_for_hangups(1)  # the model stops generating, not just we reading
    fake.responder = lambda request: REPLY
    fake.chunk_delay_s = 0.0
    assert ask(model) == REPLY  # on a new connection: the cut one is not lent again
    assert fake.connections == 2


def test_a_polled_cancel_mid_reply_ends_the_call(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.responder = lambda request: LONG_REPLY
    fake.chunk_delay_s = HOUR
    with pytest.raises(Cancelled):  # a plain callable: looked at every 100 ms
        ask(model, timeout_s=HOUR, should_stop=lambda: fake.chunks >= 1)
    assert fake.wait_for_hangups(1)


def test_a_silent_model_is_interruptible(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.latency_s = HOUR  # nothing at all, not even headers
    with pytest.raises(Cancelled):
        ask(model, timeout_s=HOUR, should_stop=lambda: fake.call_count >= 1)
    assert fake.wait_for_hangups(1)


def test_a_stop_signal_wakes_a_silent_model_call_without_polling(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.latency_s = HOUR
    cancelled = threading.Event()
    looks: list[float] = []

    def condition() -> bool:
        looks.append(time.monotonic())
        return cancelled.is_set()

    signal = StopSignal(condition)

    def cancel() -> None:
        cancelled.set()
        signal.wake()

    # Half a second in the wait: five looks, had the call polled ten times a second.
    threading.Timer(0.5, cancel).start()
    with pytest.raises(Cancelled):
        ask(model, timeout_s=HOUR, should_stop=signal)
    assert len(looks) <= 3  # before the request, and when woken: not ten times a second


def test_a_wake_cuts_a_silent_call_on_a_kept_alive_connection(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    assert ask(model) == REPLY  # the connection is open and kept now
    fake.latency_s = HOUR
    with pytest.raises(Cancelled):
        ask(model, timeout_s=HOUR, should_stop=cancel_when(lambda: fake.call_count >= 2))
    assert fake.wait_for_hangups(1)
    fake.latency_s = 0.0
    assert ask(model) == REPLY  # the cut connection is replaced
    assert fake.connections == 2


def test_a_stop_signal_still_polls_what_cannot_wake_it(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    fake.latency_s = HOUR
    with pytest.raises(Cancelled):
        ask(model, timeout_s=HOUR,
            should_stop=StopSignal(lambda: fake.call_count >= 1, poll_s=0.1))
    assert fake.wait_for_hangups(1)


def test_a_cancel_during_the_tls_handshake_cuts_it(no_proxy_settings: pytest.MonkeyPatch) -> None:
    # The kernel takes the connection; nobody ever answers the TLS ClientHello.
    hello = threading.Event()

    def hear_the_hello(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            while conn.recv(4096):  # the ClientHello, then nothing until the client's cut
                hello.set()

    with socket.create_server(("127.0.0.1", 0)) as listener:
        host = f"https://127.0.0.1:{listener.getsockname()[1]}"
        server = threading.Thread(target=hear_the_hello, args=(listener,), daemon=True)
        server.start()
        with OllamaChatModel(host=host, retries=1, connect_timeout_s=HOUR) as model, \
                pytest.raises(Cancelled):
            ask(model, timeout_s=HOUR, should_stop=hello.is_set)
        server.join(10)
        assert not server.is_alive(), "the client did not hang up"


@pytest.mark.parametrize("when", ["silent", "mid-reply"])
def test_the_step_deadline_ends_the_call_when_nothing_else_would(
    fake: FakeOllama, model: OllamaChatModel, when: str
) -> None:
    if when == "silent":
        fake.latency_s = HOUR
    else:
        fake.responder = lambda request: LONG_REPLY
        fake.chunk_delay_s = HOUR
    with pytest.raises(StepTimeout, match="step timeout"):
        ask(model, timeout_s=0.3, should_stop=StopSignal(lambda: False))
    assert fake.wait_for_hangups(1)


def test_a_reply_that_keeps_trickling_in_ends_at_the_step_deadline(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    # A word every 100 ms for an hour: no read ever waits long enough to time out, so
    # only the step deadline, watched apart from the reads, ends the call.
    fake.responder = lambda request: " ".join(["word"] * 36_000)
    fake.chunk_delay_s = 0.1
    with pytest.raises(StepTimeout, match="step timeout"):
        ask(model, timeout_s=1.0)
    assert fake.wait_for_hangups(1)


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
    assert fake.hangups == 0


# --- connections ---------------------------------------------------------------------


def test_calls_reuse_one_connection_and_read_on_the_callers_thread(
    fake: FakeOllama, model: OllamaChatModel
) -> None:
    def others() -> set[str]:  # the client's threads, but the watchdog
        return {t.name for t in threading.enumerate()
                if t.name != "model-call-watchdog" and "process_request" not in t.name}

    threads_before = others()
    for _ in range(5):
        assert ask(model) == REPLY
    # Each reply is read to its end, so its connection carries the next call.
    assert fake.connections == 1
    assert others() == threads_before


def test_concurrent_calls_keep_a_connection_each(fake: FakeOllama, model: OllamaChatModel) -> None:
    fake.latency_s = 0.2  # long enough for the three calls of a round to overlap
    replies: list[str] = []

    def call(barrier: threading.Barrier) -> None:
        barrier.wait(5)
        replies.append(ask(model))

    for _ in range(3):
        barrier = threading.Barrier(3)
        threads = [threading.Thread(target=call, args=(barrier,)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert replies == [REPLY] * 9
    assert fake.connections == 3  # one per call at a time, kept for the next rounds


def test_a_reply_framed_by_its_length_keeps_its_connection_too(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    def answer(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(HI), HI))
        return True

    with raw_server(answer) as server, OllamaChatModel(host=server.url, retries=1) as model:
        assert [ask(model, stop=()) for _ in range(3)] == ["hi"] * 3
    assert server.connections == 1


# --- where the request goes ----------------------------------------------------------


def test_an_environment_proxy_carries_the_call(no_proxy_settings: pytest.MonkeyPatch) -> None:
    with raw_server(ndjson_reply(HI)) as proxy:  # a forward proxy sees the absolute URL
        no_proxy_settings.setenv("HTTP_PROXY", f"http://jo:s%40fe@127.0.0.1:{proxy.port}")
        with OllamaChatModel(host="http://ollama.internal:11434/ollama", retries=1) as model:
            assert ask(model, stop=()) == "hi"
            assert ask(model, stop=()) == "hi"
    request = proxy.requests[0]
    assert request.startswith(b"POST http://ollama.internal:11434/ollama/api/chat HTTP/1.1\r\n")
    assert b"\r\nHost: ollama.internal:11434\r\n" in request
    assert b"\r\nProxy-Authorization: Basic " + base64.b64encode(b"jo:s@fe") + b"\r\n" in request
    assert proxy.connections == 1  # kept alive through the proxy too


def test_an_https_server_is_reached_through_a_tunnel_the_proxy_opens(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    def open_tunnel(conn: socket.socket, body: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        return False  # and hang up: no TLS server behind this proxy

    with raw_server(open_tunnel) as proxy:
        no_proxy_settings.setenv("HTTPS_PROXY", f"http://jo:safe@127.0.0.1:{proxy.port}")
        with OllamaChatModel(host="https://ollama.internal/ollama", retries=1) as model, \
                pytest.raises(ModelUnavailable, match="could not reach"):
            ask(model)
    (request,) = proxy.requests
    assert request.startswith(b"CONNECT ollama.internal:443 HTTP/1.1\r\n")
    assert b"\r\nProxy-Authorization: Basic " + base64.b64encode(b"jo:safe") + b"\r\n" in request


def test_a_proxy_that_is_not_http_is_a_clear_model_error(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    no_proxy_settings.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with OllamaChatModel(host="https://ollama.internal", backoff_initial_s=0.01) as model, \
            pytest.raises(ModelError, match="a socks5:// proxy .* http:// proxies only") as failure:
        ask(model)
    assert not isinstance(failure.value, ModelUnavailable)  # not retried: it would not help


def test_no_proxy_sends_the_call_straight_to_the_server(
    fake: FakeOllama, no_proxy_settings: pytest.MonkeyPatch
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nothing_listens = f"http://127.0.0.1:{unused.getsockname()[1]}"
    no_proxy_settings.setenv("HTTP_PROXY", nothing_listens)
    no_proxy_settings.setenv("NO_PROXY", "127.0.0.1")
    with OllamaChatModel(host=fake.url, retries=1) as model:
        assert ask(model) == REPLY


def test_a_host_with_a_path_prefix_keeps_it(no_proxy_settings: pytest.MonkeyPatch) -> None:
    # Ollama behind a reverse proxy at /ollama: readiness (the ollama client) keeps the
    # prefix, so the chat must too.
    with raw_server(ndjson_reply(HI)) as server, \
            OllamaChatModel(host=f"{server.url}/ollama", retries=1) as model:
        assert ask(model, stop=()) == "hi"
    assert server.requests[0].startswith(b"POST /ollama/api/chat HTTP/1.1\r\n")
