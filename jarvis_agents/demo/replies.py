"""What a scripted model says: a `Turn` (text, reasoning, tool calls, usage), and how the
server cuts it into the pieces a model streams. Both protocols of the server
(`ollama_api`, `openai_api`) send the same Turn, each in its own wire format."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class ScriptExhausted(Exception):
    """Raised by a by_turn responder asked for a turn its script does not have (HTTP 400)."""


@dataclass(frozen=True)
class ToolCall:
    """A tool call a scripted model makes.

    `arguments` as a dict is sent as JSON (an object to Ollama, text to OpenAI
    clients); as a string it is sent verbatim as the arguments' text, which is how a
    test sends malformed arguments (OpenAI protocol only: Ollama always sends an
    object). `id` None: Ollama sends none, as older servers do; OpenAI gets one made up.
    """

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True)
class Turn:
    """One scripted reply. `usage` is (input tokens, output tokens); None counts the
    request's messages and the reply's pieces."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str = ""
    usage: tuple[int, int] | None = None

    def counted(self, request: dict[str, Any]) -> tuple[int, int]:
        if self.usage is not None:
            return self.usage
        return len(request.get("messages", [])), len(pieces(self.text)) + len(self.tool_calls)


def as_turn(reply: str | Turn) -> Turn:
    return reply if isinstance(reply, Turn) else Turn(text=reply)


def pieces(text: str) -> list[str]:
    """Token-like pieces: a word with its leading whitespace, as models stream them."""
    return re.findall(r"\s*\S+|\s+", text)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(cuts)] if cuts else text


def thirds(text: str) -> list[str]:
    """`text` in up to three pieces, as servers spread a tool call's arguments."""
    if len(text) < 3:
        return [text]
    a, b = len(text) // 3, 2 * len(text) // 3
    return [text[:a], text[a:b], text[b:]]
