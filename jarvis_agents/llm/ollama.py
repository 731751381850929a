"""The Ollama adapter: a ChatModel over Ollama's `/api/chat`, streamed and interruptible.

The reply is streamed (`"stream": true`) so that a cancellation or the step
deadline takes effect mid-reply. It is read on the calling thread: handing the
read to another thread and waiting for it cost a thread switch each way per model
call (CPU, and up to a GIL switch interval of latency under load). What may
interrupt a read that is silent for seconds (a model loading before its first
token) comes from outside: a `StopSignal`'s `wake()` (a cancellation, a shutdown)
and, for conditions nobody wakes for, a watchdog thread that polls them every
`poll_s` (100 ms for a plain callable), both of which shut the connection's socket
down (`_Call.abandon`) so the blocked read returns at once. No read waits past the
step deadline (its timeout ends there), and a reply that trickles is checked
against the deadline and the cancellation between chunks.

Why the stream is read with httpx clients made like the `ollama` client's own, and
`json.loads` per line, rather than `Client.chat(stream=True)`: that builds a pydantic
model per message sent and per NDJSON chunk received (a reply is a dozen chunks),
and it leaves the response unread after the last chunk, so httpx drops the
connection and every call opened a new one. Read this way a call costs about half
the CPU. The `ollama` client still owns the connection settings (host parsing,
headers, `OLLAMA_API_KEY`) and the readiness calls, and its `ResponseError` carries
the server's failures.

Failures are sorted here, once: transient ones (connection refused or reset,
timeouts, HTTP 5xx and 429, a stream cut short) are retried by
`jarvis_agents.retry.model_call_policy`; an unknown model and other 4xx answers are not.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self, TypedDict

import httpx
import ollama

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ModelError, ModelNotFound, ModelUnavailable, StepTimeout
from jarvis_agents.llm.base import ChatMessage, StopSignal
from jarvis_agents.llm.connections import ClientLender
from jarvis_agents.retry import TransientModelError, model_call_policy

logger = logging.getLogger(__name__)

POLL_S = 0.1  # the Protocol's promise: Cancelled or StepTimeout within ~100 ms

# A read timeout that ends at the step deadline should find the deadline passed.
_DEADLINE_MARGIN_S = 0.005


class PingResult(TypedDict):
    """What a readiness check learns from the Ollama server."""

    reachable: bool
    models: list[str]
    error: str | None


@dataclass(frozen=True)
class _Interrupts:
    """The two reasons to abandon a call early, checked between waits and backoffs."""

    should_stop: Callable[[], bool]
    deadline: float
    budget_s: float
    # How long a wait may last before should_stop is looked at again (None: it wakes us).
    poll_s: float | None = field(init=False)

    def __post_init__(self) -> None:
        poll_s = self.should_stop.poll_s if isinstance(self.should_stop, StopSignal) else POLL_S
        object.__setattr__(self, "poll_s", poll_s)

    def waking(self, waker: Callable[[], None]) -> AbstractContextManager[None]:
        """Run `waker` whenever should_stop may have flipped, while the block runs."""
        if isinstance(self.should_stop, StopSignal):
            return self.should_stop.waking(waker)
        return nullcontext()

    def wait_s(self, until: float) -> float:
        """How long to wait before the next look: up to `until`, the deadline or a poll."""
        wait = min(until, self.deadline) - time.monotonic()
        return max(wait if self.poll_s is None else min(wait, self.poll_s), 0.0)

    def check(self) -> None:
        if self.should_stop():
            raise Cancelled("the agent was cancelled while waiting for the model")
        if time.monotonic() >= self.deadline:
            raise StepTimeout(
                "the model did not finish its reply within the step timeout "
                f"({max(self.budget_s, 0.0):.1f} s)"
            )

    def sleep(self, seconds: float) -> None:
        """A backoff that raises Cancelled or StepTimeout instead of sleeping through them."""
        end = time.monotonic() + seconds
        woken = threading.Event()
        with self.waking(woken.set):
            while True:
                self.check()
                if time.monotonic() >= end:
                    return
                woken.wait(self.wait_s(end))


class _Call:
    """One attempt, read on the caller's thread, and the way to cut it from another.

    `abandon()` (a cancellation's wake-up, or the watchdog) shuts the connection's
    socket down: the read blocked on it returns at once, on the reading thread,
    which then raises Cancelled. shutdown() rather than close(): the descriptor stays
    the socket's until its owner closes it, so no other connection can be hit.
    """

    def __init__(self) -> None:
        self.abandoned = False
        self._stream: object | None = None
        self._lock = threading.Lock()

    def attach(self, stream: object | None) -> None:
        """The network stream the request goes out on (set before the read, and on connect)."""
        if stream is None:
            return
        with self._lock:
            self._stream = stream
            if not self.abandoned:
                return
        _shut(stream)

    def abandon(self) -> None:
        with self._lock:
            if self.abandoned:
                return
            self.abandoned = True
            stream = self._stream
        if stream is not None:
            _shut(stream)


def _shut(stream: object) -> None:
    sock = stream.get_extra_info("socket")  # type: ignore[attr-defined]
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed: nothing left to interrupt
            sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One thread that looks at the stop conditions nobody wakes for, every poll_s."""

    def __init__(self) -> None:
        self._calls: dict[_Call, tuple[Callable[[], bool], float]] = {}
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, call: _Call, interrupts: _Interrupts) -> Iterator[None]:
        if interrupts.poll_s is None:  # a StopSignal that wakes for all its conditions
            yield
            return
        with self._changed:
            self._calls[call] = (interrupts.should_stop, interrupts.poll_s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ollama-watchdog",
                                                daemon=True)
                self._thread.start()
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._calls.pop(call, None)

    def _run(self) -> None:
        next_look: dict[_Call, float] = {}
        while True:
            with self._changed:
                while not self._calls:
                    next_look.clear()
                    self._changed.wait()
                now = time.monotonic()
                due = []
                for call, (should_stop, poll_s) in self._calls.items():
                    at = next_look.setdefault(call, now + poll_s)
                    if at <= now:
                        due.append((call, should_stop))
                        next_look[call] = now + poll_s
                for call in [c for c in next_look if c not in self._calls]:
                    del next_look[call]
                wait_s = max(min(next_look.values()) - now, 0.001) if next_look else None
            for call, should_stop in due:
                try:
                    stop = should_stop()
                except Exception:  # a broken condition must not end the watchdog
                    logger.exception("a should_stop condition failed")
                    continue
                if stop:
                    call.abandon()
            with self._changed:
                if not due:
                    self._changed.wait(wait_s)


_WATCHDOG = _Watchdog()


class OllamaChatModel:
    """ChatModel over an Ollama server (see `jarvis_agents.llm.base.ChatModel`)."""

    def __init__(
        self,
        *,
        host: str,
        retries: int = 3,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        if retries < 1:
            raise ValueError(f"retries counts attempts and must be at least 1, not {retries}")
        self.host = host.rstrip("/")
        self.retries = retries
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        # The ollama client owns the connection settings (host parsing, headers,
        # OLLAMA_API_KEY); replies are read on one-connection clients made like its
        # httpx.Client, lent to one reader at a time (see llm/connections.py for why
        # not on that client's own pool). No cap on connections: abandoned readers
        # hold one until their next chunk, and a worker running 100 agents must not
        # queue behind them; Ollama itself limits how many replies it generates.
        self._client = ollama.Client(
            host=self.host, timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        )
        self._connections = ClientLender.like(self._client._client)
        template = self._client._client
        self._chat_url = template.base_url.join("/api/chat")
        self._headers = httpx.Headers(template.headers)
        self._headers["Content-Type"] = "application/json"

    @classmethod
    def from_settings(cls, settings: Settings) -> OllamaChatModel:
        # A read that waits longer than a whole step can never be useful.
        return cls(
            host=settings.ollama_host,
            retries=settings.model_retries,
            read_timeout_s=settings.step_timeout_s,
        )

    def close(self) -> None:
        self._connections.close()
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the ChatModel protocol ------------------------------------------------------

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        stop: Sequence[str],
        deadline: float,
        should_stop: Callable[[], bool],
    ) -> str:
        interrupts = _Interrupts(should_stop, deadline, deadline - time.monotonic())
        interrupts.check()
        payload = [{"role": m.role, "content": m.content} for m in messages]
        stops = [s for s in stop if s]
        policy = model_call_policy(
            self.retries,
            sleep=interrupts.sleep,
            initial_s=self.backoff_initial_s,
            max_s=self.backoff_max_s,
            what=f"chat with {model} at {self.host}",
        )
        attempts = 0
        try:
            for attempt in policy:
                with attempt:
                    attempts += 1
                    reply = self._attempt(payload, model=model, stop=stops, interrupts=interrupts)
                    return _cut_at_stop(reply, stops)
        except TransientModelError as exc:
            raise ModelUnavailable(self._unavailable_message(exc, attempts)) from exc
        raise AssertionError("unreachable: the retry policy re-raises the last failure")

    # --- one attempt -----------------------------------------------------------------

    def _attempt(
        self, payload: list[dict[str, str]], *, model: str, stop: list[str], interrupts: _Interrupts
    ) -> str:
        """One streamed request, read on this thread; a cancel shuts its socket down."""
        body = {"model": model, "messages": payload, "stream": True, "options": {"stop": stop}}
        call = _Call()

        def woken() -> None:
            if interrupts.should_stop():
                call.abandon()

        with interrupts.waking(woken), _WATCHDOG.watching(call, interrupts):
            interrupts.check()
            try:
                reply = self._read(call, body, interrupts)
            except Exception as exc:
                if call.abandoned:  # only ever for a should_stop() seen True
                    raise Cancelled("the agent was cancelled while waiting for the model") from None
                if time.monotonic() >= interrupts.deadline:
                    interrupts.check()
                if isinstance(exc, ModelError):
                    raise
                classified = self._classify(exc, model)
                raise classified from exc
            if reply is None:  # abandoned, or the deadline passed, between two chunks
                if not call.abandoned:
                    interrupts.check()
                raise Cancelled("the agent was cancelled while waiting for the model")
            return reply

    def _read(self, call: _Call, body: dict[str, object], interrupts: _Interrupts) -> str | None:
        deadline = interrupts.deadline

        def quit_now() -> bool:
            return call.abandoned or time.monotonic() >= deadline

        with self._connections.lend() as http:

            def trace(event: str, info: dict[str, object]) -> None:
                # A new connection (the first, or after the server closed the last):
                # remember its stream for this client's later calls, and attach it.
                if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                    stream = info.get("return_value")
                    http._jarvis_stream = stream  # type: ignore[attr-defined]
                    call.attach(stream)

            call.attach(getattr(http, "_jarvis_stream", None))
            # No read waits past the step deadline: a silent server ends in a timeout then.
            left_s = max(deadline - time.monotonic(), 0.0) + _DEADLINE_MARGIN_S
            timeout = httpx.Timeout(
                min(self.read_timeout_s, left_s), connect=min(self.connect_timeout_s, left_s)
            )
            # Straight to the client's transport with a request built here: the
            # client's own send adds URL merging, auth and redirect handling and a
            # cookie jar update per response, a third of a call's CPU, none of it
            # needed. The transport still maps httpcore's errors to httpx's.
            request = httpx.Request(
                "POST", self._chat_url, headers=self._headers,
                content=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
                extensions={"timeout": timeout.as_dict(), "trace": trace},
            )
            response = http._transport_for_url(self._chat_url).handle_request(request)
            try:
                if not response.is_success:
                    response.read()
                    raise ollama.ResponseError(response.text, response.status_code)
                chunks = response.iter_bytes()
                reply = _read_reply(chunks, quit_now)
                if reply is None:
                    return None
                # Read the stream to its end (normally just the terminating chunk) so
                # the connection goes back to the pool instead of being closed.
                for _ in chunks:
                    pass
                return reply
            finally:
                response.close()

    # --- errors ----------------------------------------------------------------------

    def _classify(self, exc: Exception, model: str) -> Exception:
        if isinstance(exc, ollama.ResponseError):
            status, message = exc.status_code, str(exc.error)
            if status == 404 or (status == -1 and "not found" in message.lower()):
                return ModelNotFound(model)
            if status == 429 or status >= 500:
                return TransientModelError(f"HTTP {status}: {message}")
            if status == -1:  # an {"error": …} line in the middle of the stream
                return TransientModelError(f"the server failed mid-reply: {message}")
            return ModelError(
                f"the Ollama server at {self.host} refused the request (HTTP {status}): {message}"
            )
        if isinstance(exc, httpx.ConnectTimeout):
            return TransientModelError(
                f"no connection within {self.connect_timeout_s:g} s", unreachable=True
            )
        if isinstance(exc, httpx.TimeoutException):
            return TransientModelError(f"no data for {self.read_timeout_s:g} s (read timeout)")
        if isinstance(exc, (httpx.ConnectError, ConnectionError)):
            return TransientModelError(_reason(exc), unreachable=True)
        if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError)):
            return TransientModelError(f"the connection broke mid-reply: {_reason(exc)}")
        return ModelError(f"unexpected failure talking to the Ollama server at {self.host}: {exc!r}")

    def _unavailable_message(self, exc: TransientModelError, attempts: int) -> str:
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if exc.unreachable:
            return f"could not reach the Ollama server at {self.host} after {tries}: {exc.reason}"
        return f"the Ollama server at {self.host} kept failing after {tries}: {exc.reason}"

    # --- readiness -------------------------------------------------------------------

    def ping(self, *, timeout_s: float = 2.0) -> PingResult:
        """GET /api/tags: is the server up, and which models has it pulled."""
        try:
            # A short-lived client of its own: the shared one's timeouts suit replies,
            # not a readiness probe that must answer in a couple of seconds.
            with ollama.Client(host=self.host, timeout=timeout_s) as client:
                listing = client.list()
        except ollama.ResponseError as exc:
            return {"reachable": False, "models": [], "error": f"HTTP {exc.status_code}: {exc.error}"}
        except httpx.TimeoutException:
            return {"reachable": False, "models": [], "error": f"no answer within {timeout_s:g} s"}
        except (ConnectionError, httpx.HTTPError) as exc:
            # The client turns httpx.ConnectError into a generic ConnectionError; the
            # original (with the OS's reason) is still its __context__.
            cause = exc.__context__ if isinstance(exc.__context__, Exception) else exc
            return {"reachable": False, "models": [], "error": _reason(cause)}
        models = [m.model for m in listing.models if m.model]
        return {"reachable": True, "models": models, "error": None}

    def has_model(self, name: str, *, timeout_s: float = 2.0) -> bool:
        """Whether the server has pulled `name` ("llama3.2" matches "llama3.2:latest")."""
        wanted = _with_tag(name)
        return any(_with_tag(m) == wanted for m in self.ping(timeout_s=timeout_s)["models"])


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _read_reply(chunks: Iterator[bytes], quit_now: Callable[[], bool]) -> str | None:
    """The reply's text from Ollama's NDJSON stream, up to its `done` line.

    None once `quit_now()` says so (looked at before each chunk). Raises ollama.ResponseError for an {"error": …}
    line and TransientModelError when the stream ends before its `done` line.
    """
    parts: list[str] = []
    pending = b""
    for data in chunks:
        if quit_now():
            return None
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            if _read_line(line, parts):
                return "".join(parts)
    if _read_line(pending, parts):  # a last line without its newline
        return "".join(parts)
    raise TransientModelError("the reply stream ended before the reply was complete")


def _read_line(line: bytes, parts: list[str]) -> bool:
    """Adds one NDJSON line's text to `parts`; True when it is the `done` line."""
    if not line.strip():
        return False
    part = json.loads(line)
    if error := part.get("error"):
        raise ollama.ResponseError(error)
    content = (part.get("message") or {}).get("content")
    if content:
        parts.append(content)
    return bool(part.get("done"))


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    # Ollama already stops before a stop sequence; this keeps the promise even
    # against a server or proxy that ignores the option.
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text


def _reason(exc: BaseException) -> str:
    """'[Errno 111] Connection refused' → 'connection refused'."""
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc)).strip()
    if not text:
        return type(exc).__name__
    return text[0].lower() + text[1:]
