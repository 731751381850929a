"""The Ollama adapter: a ChatModel over the `ollama` client, streamed and interruptible.

The reply is streamed (`/api/chat` with `"stream": true`) so that a cancellation or
the step deadline takes effect mid-reply. The blocking HTTP read runs in a daemon
worker thread that pushes chunks onto a queue; the calling thread polls that queue
every 100 ms and checks `should_stop()` and the deadline in between. That is the only
way to interrupt a synchronous read that may be silent for seconds (a model loading
before its first token) without closing a socket under another thread's feet. An
abandoned worker notices the abandonment at its next chunk, or gives up at the read
timeout, and closes its response on the way out.

Failures are sorted here, once: transient ones (connection refused or reset,
timeouts, HTTP 5xx and 429, a stream cut short) are retried by
`jarvis_agents.retry.model_call_policy`; an unknown model and other 4xx answers are not.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self, TypedDict

import httpx
import ollama

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ModelError, ModelNotFound, ModelUnavailable, StepTimeout
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.retry import TransientModelError, model_call_policy

logger = logging.getLogger(__name__)

POLL_S = 0.1  # the Protocol's promise: Cancelled or StepTimeout within ~100 ms

_Item = tuple[Literal["chunk", "done", "error"], str | Exception | None]


class PingResult(TypedDict):
    """What a readiness check learns from the Ollama server."""

    reachable: bool
    models: list[str]
    error: str | None


@dataclass(frozen=True)
class _Interrupts:
    """The two reasons to abandon a call early, checked between polls and backoffs."""

    should_stop: Callable[[], bool]
    deadline: float
    budget_s: float

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
        while True:
            self.check()
            now = time.monotonic()
            if now >= end:
                return
            # Never sleep past the deadline: the next check() must see it promptly.
            time.sleep(min(POLL_S, end - now, max(self.deadline - now, 0.001)))


class _Stream:
    """One streaming attempt, shared by the calling thread and its worker thread."""

    def __init__(self) -> None:
        self.items: queue.Queue[_Item] = queue.Queue()
        self.abandoned = threading.Event()


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
        # One pooled client for all calls (httpx.Client is thread-safe). No connection
        # cap: abandoned workers hold a connection until their next chunk, and a
        # worker running 100 agents must not queue behind them; Ollama itself limits
        # how many replies it generates at once.
        self._client = ollama.Client(
            host=self.host,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OllamaChatModel:
        # A read that waits longer than a whole step can never be useful.
        return cls(
            host=settings.ollama_host,
            retries=settings.model_retries,
            read_timeout_s=settings.step_timeout_s,
        )

    def close(self) -> None:
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
        stream = _Stream()
        # copy_context: the helper thread's log lines keep the caller's agent id.
        worker = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._stream_into, stream, payload, model, stop),
            name=f"ollama-stream-{model}",
            daemon=True,
        )
        worker.start()
        parts: list[str] = []
        try:
            while True:
                interrupts.check()
                wait_s = min(POLL_S, max(interrupts.deadline - time.monotonic(), 0.0))
                try:
                    kind, value = stream.items.get(timeout=wait_s)
                except queue.Empty:
                    continue
                if kind == "chunk":
                    parts.append(str(value))
                elif kind == "done":
                    return "".join(parts)
                elif isinstance(value, Exception):
                    raise value
        finally:
            # On success the worker has already finished; otherwise this tells it to
            # drop the stream at its next chunk instead of reading the whole reply.
            stream.abandoned.set()

    def _stream_into(
        self, stream: _Stream, payload: list[dict[str, str]], model: str, stop: list[str]
    ) -> None:
        """Worker thread body: never raises, reports everything through the queue."""
        chunks = None
        try:
            chunks = self._client.chat(
                model=model, messages=payload, stream=True, options={"stop": stop}
            )
            for part in chunks:
                if stream.abandoned.is_set():
                    return
                if part.message.content:
                    stream.items.put(("chunk", part.message.content))
                if part.done:
                    stream.items.put(("done", None))
                    return
            stream.items.put(
                ("error", TransientModelError("the reply stream ended before the reply was complete"))
            )
        except Exception as exc:  # noqa: BLE001 - every failure is classified for the caller
            if not stream.abandoned.is_set():
                classified = self._classify(exc, model)
                classified.__cause__ = exc
                stream.items.put(("error", classified))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # leaves the client's `with stream(...)`, closing the response

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
