"""A ChatModel that plays back a script: for unit tests and offline demos.

It honours the same interruption contract as the real adapter: during an optional
per-call delay it polls `should_stop()` and the deadline every 10 ms, so a test can
cancel an agent "mid-reply" or let a step time out without a server or a model.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence

from jarvis_agents.errors import Cancelled, StepTimeout
from jarvis_agents.llm.base import Capabilities, ChatMessage, ChatReply, ChatRequest, OnDelta

POLL_S = 0.01

Reply = str | ChatReply | BaseException
Responder = Callable[[Sequence[ChatMessage]], Reply]


class ScriptExhausted(AssertionError):
    """Raised when a scripted model is asked for more replies than its script holds.

    An AssertionError on purpose: it is a mistake in the test, and it must not be
    mistaken for a model failure the engine would handle.
    """


class ScriptedChatModel:
    """ChatModel over a list of replies, or a responder choosing one per conversation.

    `replies` is either a sequence of replies (a string is a reply's text; a
    ChatReply a whole reply, tool calls and usage included) and exceptions, played in
    call order (an exception is raised instead of replying), or a callable
    `(messages) -> Reply`, such as `by_turn([...])`, which lets concurrent or resumed
    agents share one script. `delay_s` (a number or a zero-argument callable) is
    waited before each reply, interruptibly. `tools` is what `capabilities()` says of
    every model: whether an `auto` agent speaks to it natively (off by default, as
    most scripts are written in the text protocol).
    """

    def __init__(
        self,
        replies: Sequence[Reply] | Responder,
        *,
        delay_s: float | Callable[[], float] = 0.0,
        tools: bool = False,
    ) -> None:
        self._responder: Responder | None = replies if callable(replies) else None
        self._replies: list[Reply] = [] if callable(replies) else list(replies)
        self._delay_s = delay_s
        self._lock = threading.Lock()
        self._next = 0
        self.calls: list[list[ChatMessage]] = []
        self.models: list[str] = []
        self.stops: list[tuple[str, ...]] = []
        self.requests: list[ChatRequest] = []
        self.tools = tools

    @property
    def call_count(self) -> int:
        with self._lock:
            return len(self.calls)

    def complete(
        self,
        request: ChatRequest,
        *,
        deadline: float,
        should_stop: Callable[[], bool],
        on_delta: OnDelta | None = None,
    ) -> ChatReply:
        with self._lock:
            self.calls.append(list(request.messages))
            self.models.append(request.model)
            self.stops.append(tuple(request.stop))
            self.requests.append(request)
            index = self._next
            self._next += 1
        delay = self._delay_s() if callable(self._delay_s) else self._delay_s
        self._wait(delay, deadline=deadline, should_stop=should_stop)
        messages = request.messages
        reply = self._responder(messages) if self._responder is not None else self._take(index)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            reply = ChatReply(content=reply, model=request.model)
        if on_delta is not None:
            for piece in re.findall(r"\s*\S+|\s+", reply.content):  # word by word, as a model writes
                on_delta(piece)
        return reply

    def capabilities(
        self, model: str, *, deadline: float, should_stop: Callable[[], bool]
    ) -> Capabilities:
        return Capabilities(tools=self.tools)

    def _take(self, index: int) -> Reply:
        if index >= len(self._replies):
            raise ScriptExhausted(
                f"ScriptedChatModel has {len(self._replies)} replies but was asked for "
                f"reply #{index + 1}; add replies to the script or expect fewer model calls"
            )
        return self._replies[index]

    @staticmethod
    def _wait(delay_s: float, *, deadline: float, should_stop: Callable[[], bool]) -> None:
        """Wait `delay_s`, raising Cancelled or StepTimeout like the real adapter would."""
        start = time.monotonic()
        end = start + delay_s
        while True:
            if should_stop():
                raise Cancelled("the agent was cancelled while waiting for the model")
            now = time.monotonic()
            if now >= deadline:
                raise StepTimeout(
                    "the model did not finish its reply within the step timeout "
                    f"({max(deadline - start, 0.0):.1f} s)"
                )
            if now >= end:
                return
            time.sleep(min(POLL_S, end - now, max(deadline - now, 0.001)))


def by_turn(replies: Sequence[Reply]) -> Responder:
    """A responder whose reply index is the number of assistant messages so far.

    The conversation itself says which turn it is, so one script serves any number
    of concurrent agents, and an agent resumed from its persisted steps gets the
    reply that follows the last one it already has.
    """
    script = list(replies)

    def respond(messages: Sequence[ChatMessage]) -> Reply:
        turn = sum(1 for m in messages if m.role == "assistant")
        if turn >= len(script):
            raise ScriptExhausted(
                f"by_turn script has {len(script)} replies but the conversation is at "
                f"turn {turn + 1} ({turn} assistant messages already)"
            )
        return script[turn]

    return respond
