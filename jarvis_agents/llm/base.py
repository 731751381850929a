"""The one thing the engine asks of a model: a reply to a conversation.

A `ChatRequest` (messages, and optionally tools, an output schema, stop sequences)
goes in; a `ChatReply` (text, the model's reasoning, tool calls, token usage) comes
out. Every provider (`llm.ollama`, `llm.openai_compatible`, `llm.router` over both,
`llm.scripted` for tests) implements `ChatModel`.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypedDict

Role = Literal["system", "user", "assistant", "tool"]
OnDelta = Callable[[str], None]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for.

    `id` is the model's own, or one made here when the provider gives none (Ollama
    often does not). `arguments_text` is the arguments as the model wrote them;
    `arguments` the JSON object they parse to, or None with `error` saying why not:
    malformed arguments are the model's mistake to be told about, not an exception.
    """

    id: str
    name: str
    arguments_text: str
    arguments: dict[str, Any] | None
    error: str | None = None

    @classmethod
    def from_text(cls, name: str, text: str, *, id: str | None = None) -> ToolCall:
        """A call whose arguments arrive as JSON text (the OpenAI protocol)."""
        call_id = id or new_call_id()
        try:
            parsed = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            return cls(call_id, name, text, None, f"the arguments are not valid JSON: {exc}")
        if not isinstance(parsed, dict):
            kind = type(parsed).__name__
            return cls(call_id, name, text, None, f"the arguments must be a JSON object, not {kind}")
        return cls(call_id, name, text, parsed)

    @classmethod
    def from_value(cls, name: str, value: object, *, id: str | None = None) -> ToolCall:
        """A call whose arguments arrive already decoded (Ollama sends an object)."""
        if isinstance(value, str):
            return cls.from_text(name, value, id=id)
        text = json.dumps(value, ensure_ascii=False)
        if not isinstance(value, dict):
            kind = "null" if value is None else type(value).__name__
            return cls(id or new_call_id(), name, text, None,
                       f"the arguments must be a JSON object, not {kind}")
        return cls(id or new_call_id(), name, text, value)


def new_call_id() -> str:
    """An id for a tool call the provider gave none for, in OpenAI's form."""
    return f"call_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class ChatMessage:
    """One message of a conversation.

    An assistant message may carry the tool calls it made (`tool_calls`); a tool
    message is the result of one of them, named by `tool_call_id`.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model as a function: its name, what it does, and the
    JSON Schema of its arguments (an object schema)."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})

    def as_function(self) -> dict[str, Any]:
        """The tool as both Ollama and OpenAI take it in a request's `tools`."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": dict(self.parameters)}}


@dataclass(frozen=True)
class ChatRequest:
    """What to ask a model.

    `tools` are offered as functions (native tool calling); `output_schema` asks for
    an answer that is JSON valid against it, through the provider's structured output
    (Ollama `format`, OpenAI `response_format`) where it leaves tool calls possible:
    OpenAI's holds the reply's text alone, so it goes with the tools; Ollama's holds
    the whole reply, tool calls included, so beside tools it goes only when
    `answer_due` (the model's answer was sent back for not matching the schema: what
    it owes now is the answer). `stop` ends the reply before any of these strings
    (text mode); `think` asks a reasoning model to think (True), not to (False), or
    leaves it to the server (None).
    """

    messages: Sequence[ChatMessage]
    model: str
    tools: Sequence[ToolSpec] = ()
    output_schema: Mapping[str, Any] | None = None
    answer_due: bool = False
    stop: Sequence[str] = ()
    think: bool | None = None


@dataclass(frozen=True)
class Usage:
    """Tokens one model call read and wrote, as its server counted them."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ChatReply:
    """A model's whole reply: its text, its reasoning ("" if none), its tool calls,
    its usage (None when the server reported none) and the model that wrote it."""

    content: str
    model: str
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None

    def as_message(self) -> ChatMessage:
        """The assistant message that puts this reply back into the conversation."""
        return ChatMessage("assistant", self.content, tool_calls=self.tool_calls)


@dataclass(frozen=True)
class Capabilities:
    """What a model can do beyond plain text, as far as its server tells."""

    tools: bool
    thinking: bool = False


class PingResult(TypedDict):
    """What a readiness check learns from a model server."""

    reachable: bool
    models: list[str]
    error: str | None


class ChatModel(Protocol):
    """A chat model that can be interrupted.

    `deadline` is a `time.monotonic()` value: past it a call raises StepTimeout.
    `should_stop` is polled while the reply streams (and between retries): when it
    returns True the call raises Cancelled within ~100 ms, even mid-reply. A
    `StopSignal` need not be polled that often: its `wake()` interrupts the wait.
    Raises ModelNotFound for an unknown model, ModelUnavailable once retries of
    transient failures are exhausted, and ModelError for a request the server refused.
    """

    def complete(
        self,
        request: ChatRequest,
        *,
        deadline: float,
        should_stop: Callable[[], bool],
        on_delta: OnDelta | None = None,
    ) -> ChatReply:
        """The model's reply to `request`.

        `on_delta(text)` is called on the calling thread with each piece of the reply's
        text as it arrives (not its reasoning); the pieces of a call that succeeds,
        joined, are its `content`. An attempt cut short and retried does not hand on
        again what an earlier one did; should its text depart from that, nothing more
        is handed on (`llm.attempts.AttemptDeltas`). It must not raise.
        """
        ...

    def capabilities(
        self, model: str, *, deadline: float, should_stop: Callable[[], bool]
    ) -> Capabilities:
        """What `model` supports, asked of its server once per process and remembered."""
        ...


class Closing:
    """An adapter used as a context manager: leaving the block closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class StopSignal:
    """A `should_stop` that also wakes the calls waiting on it the moment it may flip.

    Called, it says whether any of its conditions holds. Whoever makes a condition
    true (a cancel listener, a shutdown) calls `wake()`, which runs the wakers that
    waiting calls registered with `waking()`, so a model call blocks for its whole
    step budget instead of polling ten times a second per agent. `poll_s` is how
    often a waiter must still look by itself, for conditions nobody wakes for (a
    Celery revoke only adds to a set); None when every condition comes with a wake().
    """

    def __init__(self, *conditions: Callable[[], bool], poll_s: float | None = None) -> None:
        self._conditions = conditions
        self.poll_s = poll_s
        self._wakers: set[Callable[[], None]] = set()
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        return any(condition() for condition in self._conditions)

    def wake(self) -> None:
        """Make every waiting call look at the conditions again, now."""
        with self._lock:
            wakers = list(self._wakers)
        for waker in wakers:
            waker()

    @contextmanager
    def waking(self, waker: Callable[[], None]) -> Iterator[None]:
        """Call `waker` on every `wake()` while the block runs.

        Register before the first look at the conditions: a wake() between that
        look and the wait then still reaches the waiter.
        """
        with self._lock:
            self._wakers.add(waker)
        try:
            yield
        finally:
            with self._lock:
                self._wakers.discard(waker)
