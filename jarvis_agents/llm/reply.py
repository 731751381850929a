"""A streamed reply put together as it arrives, the same way for every provider.

Text is cut before the first stop sequence even when the server ignores them, and
handed to `on_delta` as it comes, less any tail that may be the start of a stop
sequence (held back until the next piece tells): the pieces handed on, joined, are
the reply's text exactly.

A reply may bring at most `max_chars` characters (text, reasoning and tool-call
arguments together; README, Models): what passes them is dropped, the text ends with
`CUT_MARK`, which is handed on too, and `full` tells the reader to read no more.
"""

from __future__ import annotations

from collections.abc import Sequence

from jarvis_agents.llm.base import ChatReply, OnDelta, ToolCall, Usage

# What ends the text of a reply cut at `max_chars`: the user and the model both see it.
CUT_MARK = "\n\n[reply cut at {max_chars} characters]"


class ReplyBuilder:
    """Collects one attempt's reply: text, reasoning, tool calls and usage."""

    def __init__(
        self, model: str, *, stop: Sequence[str] = (), on_delta: OnDelta | None = None,
        max_chars: int | None = None,
    ) -> None:
        self.model = model
        self.usage: Usage | None = None
        self.max_chars = max_chars
        self.full = False  # past max_chars: nothing more is taken, nor should be read
        self._spent = 0
        self._cut = False  # something the reply would have kept was dropped
        self._stops = tuple(s for s in stop if s)
        self._firsts = frozenset(s[0] for s in self._stops)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._on_delta = on_delta
        self._text: list[str] = []
        self._held = ""  # a tail that may be the start of a stop sequence
        self._stopped = False
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []

    @property
    def room(self) -> int | None:
        """How many more characters the reply may bring (None: no cap)."""
        return None if self.max_chars is None else self.max_chars - self._spent

    def text(self, piece: str) -> None:
        if not piece or self.full:
            return
        # Text after a stop sequence counts too: a server that ignores them is read no
        # further than any other; the text kept, though, was whole.
        piece = self._take(piece, keeps=not self._stopped)
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
        if piece and not self.full and (piece := self._take(piece, keeps=True)):
            self._reasoning.append(piece)

    def tool_call(self, call: ToolCall) -> None:
        """A call, unless its arguments would pass the cap: it is then dropped, whole."""
        room = self.room
        if room is not None and len(call.arguments_text) > room:
            self.cut_short()
            return
        self._spent += len(call.arguments_text)
        self._calls.append(call)

    def cut_short(self) -> None:
        """The reply passed the cap in what the reader could not hand over (a tool call's
        arguments as they stream in, a line too long to read): nothing more is taken."""
        self.full = self._cut = True

    def finish(self) -> ChatReply:
        """The whole reply, once the stream has ended as it should."""
        if self._held:
            self._release(self._held)
            self._held = ""
        if self._cut:
            self._release(CUT_MARK.format(max_chars=self.max_chars))
            self._cut = False
        return ChatReply(
            content="".join(self._text), model=self.model, reasoning="".join(self._reasoning),
            tool_calls=tuple(self._calls), usage=self.usage,
        )

    def _take(self, piece: str, *, keeps: bool) -> str:
        """`piece`, less what passes the cap; `keeps`: whether the reply would keep it."""
        room = self.room
        if room is not None and len(piece) > room:
            piece = piece[:room]
            self.full = True
            self._cut = self._cut or keeps
        self._spent += len(piece)
        return piece

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
