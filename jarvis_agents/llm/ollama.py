"""The Ollama adapter: a ChatModel over Ollama's `/api/chat`, streamed and interruptible.

The reply is streamed (`"stream": true`) so that a cancellation or the step deadline
takes effect mid-reply: the request goes out through `jarvis_agents.llm.streaming`,
which cuts it short, and is read on the calling thread as it arrives. Its NDJSON
lines are decoded here rather than through `ollama.Client.chat(stream=True)`, which
builds a pydantic model per line and leaves the stream unread after the `done` line,
so that its connection could never carry the next call. The `ollama` client answers
the readiness probe (`ping`).

Failures are sorted here, once: transient ones (connection refused or reset,
timeouts, HTTP 5xx and 429, a stream cut short) are retried by
`jarvis_agents.retry.model_call_policy`; an unknown model and other 4xx answers are not.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Self, TypedDict

import httpx
import ollama

from jarvis_agents.config import Settings
from jarvis_agents.errors import JarvisError, ModelError, ModelNotFound, ModelUnavailable
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.llm.interrupts import Interrupts
from jarvis_agents.llm.streaming import StreamingClient, reason
from jarvis_agents.retry import TransientModelError, model_call_policy


class PingResult(TypedDict):
    """What a readiness check learns from the Ollama server."""

    reachable: bool
    models: list[str]
    error: str | None


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
        self._http = StreamingClient(
            self.host, headers=_headers(), connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s)

    @classmethod
    def from_settings(cls, settings: Settings) -> OllamaChatModel:
        # A read that waits longer than a whole step can never be useful.
        return cls(
            host=settings.ollama_host,
            retries=settings.model_retries,
            read_timeout_s=settings.step_timeout_s,
        )

    def close(self) -> None:
        self._http.close()

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
        interrupts = Interrupts(should_stop, deadline, deadline - time.monotonic())
        interrupts.check()
        stops = [s for s in stop if s]
        request = {
            "model": model, "stream": True, "options": {"stop": stops},
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        body = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
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
                    return _cut_at_stop(self._attempt(body, model, interrupts), stops)
        except TransientModelError as exc:
            raise ModelUnavailable(self._unavailable_message(exc, attempts)) from exc
        raise AssertionError("unreachable: the retry policy re-raises the last failure")

    # --- one attempt -----------------------------------------------------------------

    def _attempt(self, body: bytes, model: str, interrupts: Interrupts) -> str:
        """One streamed request; Cancelled or StepTimeout if it was cut short."""
        try:
            with self._http.post("api/chat", body, interrupts) as response:
                if not 200 <= response.status < 300:
                    raise self._refusal(response.status, _error_text(response.read()), model)
                return _read_reply(response.chunks(), model)
        except JarvisError:
            raise
        except Exception as exc:  # a reply that is not Ollama's NDJSON
            raise ModelError(
                f"unexpected reply from the Ollama server at {self.host}: {exc!r}") from exc

    # --- errors ----------------------------------------------------------------------

    def _refusal(self, status: int, message: str, model: str) -> ModelError:
        if status == 404:
            return ModelNotFound(model)
        if status == 429 or status >= 500:
            return TransientModelError(f"HTTP {status}: {message}")
        return ModelError(
            f"the Ollama server at {self.host} refused the request (HTTP {status}): {message}"
        )

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
            return {"reachable": False, "models": [], "error": reason(cause)}
        models = [m.model for m in listing.models if m.model]
        return {"reachable": True, "models": models, "error": None}

    def has_model(self, name: str, *, timeout_s: float = 2.0) -> bool:
        """Whether the server has pulled `name` ("llama3.2" matches "llama3.2:latest")."""
        wanted = _with_tag(name)
        return any(_with_tag(m) == wanted for m in self.ping(timeout_s=timeout_s)["models"])


def _headers() -> dict[str, str]:
    """What the `ollama` client sends, so that a server or a gateway sees the same from
    both: JSON, and a bearer token when OLLAMA_API_KEY is set (it reads it itself)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key := os.environ.get("OLLAMA_API_KEY"):
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _error_text(body: bytes) -> str:
    """The server's own words: Ollama answers a failure with {"error": "…"}."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        found = json.loads(text)
    except ValueError:
        return text
    error = found.get("error") if isinstance(found, dict) else None
    return str(error) if error else text


def _read_reply(chunks: Iterator[bytes], model: str) -> str:
    """The reply's text from Ollama's NDJSON stream, read as it arrives, up to its `done` line.

    Then the rest of the stream, normally just its terminating chunk, so that the
    connection can carry the next call. An {"error": …} line is the model's failure
    (transient: a runner that crashed mid-reply); a stream that ends before its `done`
    line was cut short (transient too).
    """
    parts: list[str] = []
    pending = b""
    for data in chunks:
        *lines, pending = (pending + data).split(b"\n")
        if lines and _read_lines(lines, parts, model):
            for _ in chunks:
                pass
            return "".join(parts)
    if _read_lines([pending], parts, model):  # a last line without its newline
        return "".join(parts)
    raise TransientModelError("the reply stream ended before the reply was complete")


def _read_lines(lines: list[bytes], parts: list[str], model: str) -> bool:
    """Adds the text of NDJSON lines to `parts`; True once one is the `done` line.

    The lines one read brought (a token each) are decoded in one `json.loads`, as an
    array: a call per line cost more than the decoding itself. Only if that fails
    are they decoded one by one, so that nothing after the `done` line is looked at.
    """
    lines = [line for line in lines if line.strip()]
    try:
        decoded = json.loads(b"[" + b",".join(lines) + b"]") if len(lines) > 1 else None
    except ValueError:
        decoded = None
    for index, line in enumerate(lines):
        part = decoded[index] if decoded is not None else json.loads(line)
        if error := part.get("error"):
            if "not found" in str(error).lower():
                raise ModelNotFound(model)
            raise TransientModelError(f"the server failed mid-reply: {error}")
        parts.append((part.get("message") or {}).get("content") or "")
        if part.get("done"):
            return True
    return False


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    # Ollama already stops before a stop sequence; this keeps the promise even
    # against a server or proxy that ignores the option.
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text
