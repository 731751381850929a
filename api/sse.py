"""The SSE wire format (CONTRACT §4): frames as bytes, a published step encoded once.

A hot agent watched by a thousand streams used to cost a thousand `json.dumps` of
the same event; `step_frame` encodes it once for all of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jarvis_agents.events import Message

KEEPALIVE = b": keepalive\n\n"


def sse(event: str, data: dict[str, Any], *, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@dataclass(frozen=True)
class StepFrame:
    """A published step as every stream sends it."""

    message: Message
    seq: int
    frame: bytes  # the SSE event


_last: StepFrame | None = None


def step_frame(message: Message) -> StepFrame | None:
    """The frame of a published step; None if it has no usable `seq`.

    One cached frame is enough: the hub hands the same Message object to every
    subscription of its channel one after another, so every stream but the first
    finds it here. (Keyed by identity: a Message holds a dict and has no hash.)
    """
    global _last
    cached = _last
    if cached is not None and cached.message is message:
        return cached
    try:
        seq = int(message.data["seq"])
    except (KeyError, TypeError, ValueError):
        return None
    event = str(message.data.get("type", "")).lower()
    cached = StepFrame(message, seq, sse(event, message.data, event_id=seq))
    _last = cached
    return cached
