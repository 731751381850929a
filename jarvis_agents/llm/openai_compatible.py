"""The OpenAI-compatible adapter: a ChatModel over any Chat Completions server (vLLM,
llama.cpp's server, LM Studio, Ollama's `/v1`, OpenAI), through the `openai` client.

The reply is streamed (`stream=True`, with `stream_options.include_usage` for the
token counts) and read as it arrives: text, reasoning (`reasoning_content` or
`reasoning`, which llama.cpp, vLLM and others send beside the text), and tool calls,
whose pieces arrive spread over chunks and are put together by their `index`. The
`openai` client's requests go out through `llm.openai_transport`, so that a
cancellation or the deadline cuts them as they cut Ollama's.

Failures are sorted here, once, with the client's own retries off (`max_retries=0`):
transient ones (connection refused or reset, timeouts, HTTP 5xx and 429, a stream
that ends before its `finish_reason`) are retried by `llm.attempts`; an unknown model
and other 4xx answers are not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk

from jarvis_agents.config import DEFAULT_MAX_REPLY_CHARS, DEFAULT_MAX_REPLY_TOKENS, Settings
from jarvis_agents.errors import JarvisError, ModelError, ModelNotFound
from jarvis_agents.llm.attempts import AttemptDeltas, Retries, attempt, interrupts_for
from jarvis_agents.llm.base import (
    Capabilities,
    ChatMessage,
    ChatReply,
    ChatRequest,
    Closing,
    OnDelta,
    PingResult,
    ToolCall,
    Usage,
)
from jarvis_agents.llm.openai_transport import ExchangeTransport, cutting
from jarvis_agents.llm.reply import ReplyBuilder
from jarvis_agents.llm.streaming import reason
from jarvis_agents.retry import TransientModelError

# OpenAI refuses more than four stop sequences; the rest are cut here (llm.reply).
MAX_STOP_SEQUENCES = 4
# Sent when no API key is configured: local servers take any, and the client needs one.
NO_API_KEY = "EMPTY"


class OpenAIChatModel(Closing):
    """ChatModel over an OpenAI-compatible server (see `jarvis_agents.llm.base.ChatModel`)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        retries: int = 3,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
        max_reply_tokens: int = DEFAULT_MAX_REPLY_TOKENS,
        max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_reply_tokens = max_reply_tokens
        self.max_reply_chars = max_reply_chars
        self._newer_cap: set[str] = set()  # models that asked for `max_completion_tokens`
        self.retries = Retries(retries, backoff_initial_s, backoff_max_s)
        self.server = f"the OpenAI-compatible server at {self.base_url}"
        self._api_key = api_key or NO_API_KEY
        self._transport = ExchangeTransport(
            self.base_url, connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s)
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=self._api_key, max_retries=0, timeout=None,
            http_client=httpx2.Client(transport=self._transport, timeout=None),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIChatModel:
        if not settings.openai_base_url:
            raise not_configured("an openai/… model")
        return cls(base_url=settings.openai_base_url, api_key=settings.openai_api_key,
                   retries=settings.model_retries, read_timeout_s=settings.step_timeout_s,
                   max_reply_tokens=settings.max_reply_tokens,
                   max_reply_chars=settings.max_reply_chars)

    def close(self) -> None:
        self._client.close()

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
        deltas = AttemptDeltas(on_delta)  # a retry's text is not handed on twice

        def one_attempt() -> ChatReply:
            reply = ReplyBuilder(request.model, stop=request.stop, on_delta=deltas.attempt(),
                                 max_chars=self.max_reply_chars)
            try:
                with cutting(interrupts), self._create(request) as stream:
                    _read_stream(stream, reply)
            except JarvisError:
                raise
            except openai.APIStatusError as exc:
                raise self._refusal(exc, request.model) from exc
            except openai.APIError as exc:  # an error event mid-stream
                raise TransientModelError(f"the server failed mid-reply: {exc.message}") from exc
            except Exception as exc:  # a reply that is not a Chat Completions stream
                raise ModelError(f"unexpected reply from {self.server}: {exc!r}") from exc
            return reply.finish()

        return attempt(one_attempt, interrupts=interrupts, retries=self.retries,
                       what=f"chat with {request.model} at {self.base_url}", server=self.server)

    def _create(self, request: ChatRequest) -> openai.Stream[ChatCompletionChunk]:
        """The streamed completion, its tokens capped by `max_tokens`, or by
        `max_completion_tokens` for a model that refuses the older name (OpenAI's o-series)."""
        newer = request.model in self._newer_cap
        try:
            return self._client.chat.completions.create(
                **_params(request, max_tokens=self.max_reply_tokens, newer_cap=newer))
        except openai.BadRequestError as exc:
            if newer or "max_completion_tokens" not in _error_message(exc):
                raise
        self._newer_cap.add(request.model)
        return self._client.chat.completions.create(
            **_params(request, max_tokens=self.max_reply_tokens, newer_cap=True))

    def capabilities(
        self, model: str, *, deadline: float, should_stop: Callable[[], bool]
    ) -> Capabilities:
        """Tool calling is assumed (docs/api.md §6): the protocol has no way to ask."""
        return Capabilities(tools=True)

    # --- errors ----------------------------------------------------------------------

    def _refusal(self, exc: openai.APIStatusError, model: str) -> ModelError:
        status, message = exc.status_code, _error_message(exc)
        if status == 404:
            if model in message or "model" in message.lower():
                return ModelNotFound(model, (
                    f"the model '{model}' is not available on {self.server}: {message}"))
            return ModelError(
                f"{self.server} answered HTTP 404 ({message}); check OPENAI_BASE_URL, "
                "which usually ends in /v1")
        if status == 429 or status >= 500:
            return TransientModelError(f"HTTP {status}: {message}")
        hint = "; check OPENAI_API_KEY" if status in (401, 403) else ""
        return ModelError(f"{self.server} refused the request (HTTP {status}): {message}{hint}")

    # --- readiness -------------------------------------------------------------------

    def ping(self, *, timeout_s: float = 2.0) -> PingResult:
        """GET /models: is the server up, and which models does it serve."""
        try:
            # A short-lived client of its own, as for Ollama: a probe's timeout, not a reply's.
            with openai.OpenAI(base_url=self.base_url, api_key=self._api_key, max_retries=0,
                               timeout=timeout_s) as client:
                models = [m.id for m in client.models.list().data]
        except openai.APIStatusError as exc:
            return {"reachable": False, "models": [],
                    "error": f"HTTP {exc.status_code}: {_error_message(exc)}"}
        except openai.APITimeoutError:
            return {"reachable": False, "models": [], "error": f"no answer within {timeout_s:g} s"}
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
            return {"reachable": False, "models": [], "error": reason(cause)}
        return {"reachable": True, "models": models, "error": None}


def not_configured(what: str) -> ModelError:
    """The error for a model of a provider that has no server configured."""
    return ModelError(
        f"{what} is served by an OpenAI-compatible server, and none is configured: set "
        "OPENAI_BASE_URL (e.g. http://127.0.0.1:8000/v1 for vLLM) and, if it asks for one, "
        "OPENAI_API_KEY")


def _params(request: ChatRequest, *, max_tokens: int, newer_cap: bool = False) -> dict[str, Any]:
    """The arguments of `chat.completions.create` for `request`, streamed."""
    params: dict[str, Any] = {
        "model": request.model, "messages": [_message(m) for m in request.messages],
        "stream": True, "stream_options": {"include_usage": True},
    }
    # `max_tokens` first: vLLM, LM Studio, Ollama and OpenAI read it, llama.cpp's server
    # read nothing else until 2026; only OpenAI's o-series want the newer name.
    params["max_completion_tokens" if newer_cap else "max_tokens"] = max_tokens
    if stops := [s for s in request.stop if s][:MAX_STOP_SEQUENCES]:
        params["stop"] = stops
    if request.tools:
        params["tools"] = [tool.as_function() for tool in request.tools]
    if request.output_schema is not None:
        # With tools too: it holds the reply's text, not its tool calls (OpenAI; and
        # llama.cpp's server, which then lets the model write either).
        params["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": dict(request.output_schema)}}
    return params


def _message(message: ChatMessage) -> dict[str, Any]:
    item: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        item["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments_text}}
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        item["tool_call_id"] = message.tool_call_id
    return item


def _read_stream(chunks: Iterable[ChatCompletionChunk], reply: ReplyBuilder) -> None:
    """Reads a streamed completion into `reply`, up to its end or its cap (`reply.full`);
    a stream that ends before its first choice's `finish_reason` was cut short (transient)."""
    calls: dict[int, list[Any]] = {}  # index → [id, name, argument pieces]
    arguments_read = 0
    finished = False
    for chunk in chunks:
        if chunk.model:
            reply.model = chunk.model
        if chunk.usage is not None:
            reply.usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            extra = delta.model_extra or {}
            if thinking := extra.get("reasoning_content") or extra.get("reasoning"):
                reply.reasoning(str(thinking))
            if delta.content:
                reply.text(delta.content)
            for piece in delta.tool_calls or ():
                call = calls.setdefault(piece.index, [None, "", []])
                call[0] = call[0] or piece.id
                if piece.function is not None:
                    call[1] += piece.function.name or ""
                    call[2].append(piece.function.arguments or "")
                    arguments_read += len(piece.function.arguments or "")
                    if reply.room is not None and arguments_read > reply.room:
                        del calls[piece.index]  # its arguments will never be whole
                        reply.cut_short()
                        break
            finished = finished or choice.finish_reason is not None
        if reply.full:
            break
    if not finished and not reply.full:
        raise TransientModelError("the reply stream ended before the reply was complete")
    for index in sorted(calls):
        call_id, name, arguments = calls[index]
        reply.tool_call(ToolCall.from_text(name, "".join(arguments), id=call_id))


def _error_message(exc: openai.APIStatusError) -> str:
    """The server's own words: `{"error": {"message": …}}` (OpenAI, vLLM, llama.cpp),
    `{"message": …}` or `{"detail": …}` (others)."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            found = error.get("message") or error.get("detail")
            if found:
                return str(found)
        elif isinstance(error, str):
            return error
    return exc.message
