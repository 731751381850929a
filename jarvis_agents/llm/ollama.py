"""The Ollama adapter: a ChatModel over Ollama's `/api/chat`, streamed and interruptible.

The reply is streamed (`"stream": true`) so that a cancellation or the step deadline
takes effect mid-reply: the request goes out through `jarvis_agents.llm.streaming`,
which cuts it short, and is read on the calling thread as it arrives. Its NDJSON
lines are decoded by `jarvis_agents.llm.ollama_protocol` rather than through
`ollama.Client.chat(stream=True)`, which builds a pydantic model per line and leaves
the stream unread after the `done` line, so that its connection could never carry
the next call. A model's capabilities come from `/api/show` the same way, asked
once per model. The `ollama` client answers the readiness probe (`ping`).

Failures are sorted here, once: transient ones (connection refused or reset,
timeouts, HTTP 5xx and 429, a stream cut short) are retried by
`jarvis_agents.retry.model_call_policy`; an unknown model and other 4xx answers are not.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import ollama

from jarvis_agents.config import DEFAULT_MAX_REPLY_CHARS, DEFAULT_MAX_REPLY_TOKENS, Settings
from jarvis_agents.errors import JarvisError, ModelError, ModelNotFound
from jarvis_agents.llm import wire
from jarvis_agents.llm.attempts import AttemptDeltas, Retries, attempt, interrupts_for
from jarvis_agents.llm.base import (
    Capabilities,
    ChatReply,
    ChatRequest,
    Closing,
    OnDelta,
    PingResult,
)
from jarvis_agents.llm.interrupts import Interrupts
from jarvis_agents.llm.ollama_protocol import (
    capabilities_of,
    encode_request,
    error_text,
    read_reply,
)
from jarvis_agents.llm.reply import ReplyBuilder
from jarvis_agents.llm.streaming import StreamingClient, reason
from jarvis_agents.retry import TransientModelError


class OllamaChatModel(Closing):
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
        max_reply_tokens: int = DEFAULT_MAX_REPLY_TOKENS,
        max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
    ) -> None:
        self.host = host.rstrip("/")
        self.max_reply_tokens = max_reply_tokens
        self.max_reply_chars = max_reply_chars
        self.retries = Retries(retries, backoff_initial_s, backoff_max_s)
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.server = f"the Ollama server at {self.host}"
        self._http = StreamingClient(
            self.host, headers=_headers(), connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s)
        self._capabilities: dict[str, Capabilities] = {}
        self._asking: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> OllamaChatModel:
        # A read that waits longer than a whole step can never be useful.
        return cls(
            host=settings.ollama_host,
            retries=settings.model_retries,
            read_timeout_s=settings.step_timeout_s,
            max_reply_tokens=settings.max_reply_tokens,
            max_reply_chars=settings.max_reply_chars,
        )

    def close(self) -> None:
        self._http.close()

    # --- the ChatModel protocol ------------------------------------------------------

    def complete(
        self,
        request: ChatRequest,
        *,
        deadline: float,
        should_stop: Callable[[], bool],
        on_delta: OnDelta | None = None,
    ) -> ChatReply:
        interrupts = interrupts_for(should_stop, deadline)
        body = encode_request(request, max_tokens=self.max_reply_tokens)

        deltas = AttemptDeltas(on_delta)  # a retry's text is not handed on twice

        def one_attempt() -> ChatReply:
            reply = ReplyBuilder(request.model, stop=request.stop, on_delta=deltas.attempt(),
                                 max_chars=self.max_reply_chars)
            with self._exchange("api/chat", body, request.model, interrupts) as response:
                read_reply(response.chunks(), reply)
            return reply.finish()

        return attempt(one_attempt, interrupts=interrupts, retries=self.retries,
                       what=f"chat with {request.model} at {self.host}", server=self.server)

    def capabilities(
        self, model: str, *, deadline: float, should_stop: Callable[[], bool]
    ) -> Capabilities:
        """From `/api/show`: asked once per model (callers asking at once wait for the one
        answer) and remembered; a failure is not, so the next caller asks again."""
        with self._lock:
            if (known := self._capabilities.get(model)) is not None:
                return known
            asking = self._asking.setdefault(model, threading.Lock())
        with asking:
            with self._lock:
                if (known := self._capabilities.get(model)) is not None:
                    return known
            interrupts = interrupts_for(should_stop, deadline)
            body = json.dumps({"model": model}).encode()

            def one_attempt() -> list[str]:
                with self._exchange("api/show", body, model, interrupts) as response:
                    return capabilities_of(response.read())

            listed = attempt(one_attempt, interrupts=interrupts, retries=self.retries,
                             what=f"show {model} at {self.host}", server=self.server)
            found = Capabilities(tools="tools" in listed, thinking="thinking" in listed)
            with self._lock:
                self._capabilities[model] = found
            return found

    def forget(self, model: str) -> None:
        """Forget what the server said `model` can do (the model is no longer in use)."""
        with self._lock:
            self._capabilities.pop(model, None)
            self._asking.pop(model, None)

    # --- one attempt -----------------------------------------------------------------

    @contextmanager
    def _exchange(
        self, path: str, body: bytes, model: str, interrupts: Interrupts
    ) -> Iterator[wire.Response]:
        """One POST whose successful response the block reads; Cancelled or StepTimeout
        if it was cut short, the server's refusal sorted (see `_refusal`)."""
        try:
            with self._http.post(path, body, interrupts) as response:
                if not 200 <= response.status < 300:
                    raise self._refusal(response.status, error_text(response.read()), model)
                yield response
        except JarvisError:
            raise
        except Exception as exc:  # a reply that is not Ollama's JSON
            raise ModelError(f"unexpected reply from {self.server}: {exc!r}") from exc

    # --- errors ----------------------------------------------------------------------

    def _refusal(self, status: int, message: str, model: str) -> ModelError:
        if status == 404:
            return ModelNotFound(model)
        if status == 429 or status >= 500:
            return TransientModelError(f"HTTP {status}: {message}")
        return ModelError(f"{self.server} refused the request (HTTP {status}): {message}")

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
