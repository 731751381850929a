"""The one thing the engine asks of a model: a reply to a conversation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


class ChatModel(Protocol):
    """A chat model that can be interrupted.

    `deadline` is a `time.monotonic()` value: past it the call raises StepTimeout.
    `should_stop` is polled while the reply streams (and between retries): when it
    returns True the call raises Cancelled within ~100 ms, even mid-reply.
    Raises ModelNotFound for an unknown model and ModelUnavailable once retries
    of transient failures are exhausted.
    """

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        stop: Sequence[str],
        deadline: float,
        should_stop: Callable[[], bool],
    ) -> str: ...
