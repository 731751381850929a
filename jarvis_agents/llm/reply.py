"""A streamed reply put together as it arrives, the same way for every provider.

Text is cut before the first stop sequence even when the server ignores them, and
handed to `on_delta` as it comes, less any tail that may be the start of a stop
sequence (held back until the next piece tells): the pieces handed on, joined, are
the reply's text exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from jarvis_agents.llm.base import ChatReply, OnDelta, ToolCall, Usage


class ReplyBuilder:
    """Collects one attempt's reply: text, reasoning, tool calls and usage."""

    def __init__(self, model: str, *, stop: Sequence[str] = (), on_delta: OnDelta | None = None) -> None:
        self.model = model
        self.usage: Usage | None = None
        self._stops = tuple(s for s in stop if s)
        self._firsts = frozenset(s[0] for s in self._stops)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._on_delta = on_delta
        self._text: list[str] = []
        self._held = ""  # a tail that may be the start of a stop sequence
        self._stopped = False
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []

    def text(self, piece: str) -> None:
        if not piece or self._stopped:
            return
        if not self._stops:
            self._release(piece)
            return
        pending = self._held + piece
        cuts = [i for i in (pending.find(s) for s in self._stops) if i >= 0]
        if cuts:
            self._release(pending[: min(cuts)])
            self._held, self._stopped = "", True
            return
        keep = self._stop_prefix_length(pending)
        self._release(pending[: len(pending) - keep])
        self._held = pending[len(pending) - keep:]

    def reasoning(self, piece: str) -> None:
        if piece:
            self._reasoning.append(piece)

    def tool_call(self, call: ToolCall) -> None:
        self._calls.append(call)

    def finish(self) -> ChatReply:
        """The whole reply, once the stream has ended as it should."""
        if self._held:
            self._release(self._held)
            self._held = ""
        return ChatReply(
            content="".join(self._text), model=self.model, reasoning="".join(self._reasoning),
            tool_calls=tuple(self._calls), usage=self.usage,
        )

    def _release(self, text: str) -> None:
        if text:
            self._text.append(text)
            if self._on_delta is not None:
                self._on_delta(text)

    def _stop_prefix_length(self, pending: str) -> int:
        """The length of the longest tail of `pending` that begins a stop sequence."""
        tail = pending[-(self._longest - 1):] if self._longest > 1 else ""
        if not any(c in tail for c in self._firsts):  # nearly every piece: no stop can begin
            return 0
        for start, char in enumerate(tail):
            if char in self._firsts and any(s.startswith(tail[start:]) for s in self._stops):
                return len(tail) - start
        return 0
