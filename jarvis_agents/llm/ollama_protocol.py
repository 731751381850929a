"""Ollama's `/api/chat` on the wire: the request body, and the NDJSON reply read as it
arrives (https://github.com/ollama/ollama/blob/main/docs/api.md).

A streamed reply is one JSON object per line: `message.content` and
`message.thinking` pieces, `message.tool_calls` (each `{"id"?, "function": {"name",
"arguments": {…}}}`, in any line, the `done` one included), then a `done` line with
the counts (`prompt_eval_count`, `eval_count`). A line `{"error": …}` is the server
failing mid-reply.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from jarvis_agents.errors import ModelNotFound
from jarvis_agents.llm.base import ChatMessage, ChatRequest, ToolCall, Usage
from jarvis_agents.llm.reply import ReplyBuilder
from jarvis_agents.retry import TransientModelError

# A line of the stream spends at most 6 bytes on a character of the reply (a `\u00XX`
# escape), besides its other fields: a longer one holds more than the reply may.
_MAX_LINE_BYTES_PER_CHAR = 6
_LINE_SLACK = 64 * 1024


def encode_request(request: ChatRequest, *, stream: bool = True, max_tokens: int | None = None) -> bytes:
    """The JSON body of a chat request; `max_tokens` caps the reply (`num_predict`)."""
    options: dict[str, Any] = {"stop": [s for s in request.stop if s]}
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    body: dict[str, Any] = {
        "model": request.model, "stream": stream, "options": options,
        "messages": _messages(request.messages),
    }
    if request.tools:
        body["tools"] = [tool.as_function() for tool in request.tools]
    if request.output_schema is not None and (not request.tools or request.answer_due):
        # `format` holds the whole reply to the schema: the tool calls a model writes
        # (which Ollama's parser reads out of its text) could no longer be written, and
        # Ollama answers with no call at all (ollama/ollama#8095). Beside tools, then,
        # only once the answer is all the model owes (ChatRequest).
        body["format"] = dict(request.output_schema)
    if request.think is not None:
        body["think"] = request.think
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    names: dict[str, str] = {}  # a tool message names its tool too (`tool_name`)
    encoded = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            item["tool_calls"] = [_call(call) for call in message.tool_calls]
            names.update((call.id, call.name) for call in message.tool_calls)
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
            if message.tool_call_id in names:
                item["tool_name"] = names[message.tool_call_id]
        encoded.append(item)
    return encoded


def _call(call: ToolCall) -> dict[str, Any]:
    # Ollama takes the arguments as an object; unreadable ones were never run.
    return {"id": call.id, "function": {"name": call.name, "arguments": call.arguments or {}}}


def read_reply(chunks: Iterator[bytes], reply: ReplyBuilder) -> None:
    """Reads Ollama's NDJSON stream into `reply` as it arrives, up to its `done` line.

    Then the rest of the stream, normally just its terminating chunk, so that the
    connection can carry the next call. An {"error": …} line is the model's failure
    (transient: a runner that crashed mid-reply); a stream that ends before its `done`
    line was cut short (transient too). A reply that passed its cap (`reply.full`) is
    read no further: its connection is closed rather than read to its end.
    """
    pending = b""
    for data in chunks:
        *lines, pending = (pending + data).split(b"\n")
        if lines and _read_lines(lines, reply):
            for _ in chunks:
                pass
            return
        if reply.full:
            return
        if reply.room is not None and len(pending) > _MAX_LINE_BYTES_PER_CHAR * reply.room + _LINE_SLACK:
            reply.cut_short()  # one line holds more than the reply may: it is not read whole
            return
    if _read_lines([pending], reply) or reply.full:  # a last line without its newline
        return
    raise TransientModelError("the reply stream ended before the reply was complete")


def _read_lines(lines: list[bytes], reply: ReplyBuilder) -> bool:
    """Adds what NDJSON lines bring to `reply`; True once one is the `done` line.

    The lines one read brought (a token each) are decoded in one `json.loads`, as an
    array, and their text goes to `reply` as one piece: they arrived together, and a
    call per line cost more than the decoding itself. Only if that fails are they
    decoded one by one, so that nothing after the `done` line is looked at.
    """
    lines = [line for line in lines if line.strip()]
    try:
        decoded = json.loads(b"[" + b",".join(lines) + b"]") if len(lines) > 1 else None
    except ValueError:
        decoded = None
    texts: list[str] = []
    try:
        for index, line in enumerate(lines):
            if reply.full:
                return False
            part = decoded[index] if decoded is not None else json.loads(line)
            if error := part.get("error"):
                if "not found" in str(error).lower():
                    raise ModelNotFound(reply.model)
                raise TransientModelError(f"the server failed mid-reply: {error}")
            message = part.get("message") or {}
            texts.append(message.get("content") or "")
            if thinking := message.get("thinking"):
                reply.reasoning(thinking)
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                reply.tool_call(ToolCall.from_value(
                    str(function.get("name") or ""), function.get("arguments"), id=call.get("id")))
            if part.get("done"):
                reply.model = part.get("model") or reply.model
                if "prompt_eval_count" in part or "eval_count" in part:
                    reply.usage = Usage(int(part.get("prompt_eval_count") or 0),
                                        int(part.get("eval_count") or 0))
                return True
        return False
    finally:
        reply.text("".join(texts))  # what came before a failure too, as one by one did


def error_text(body: bytes) -> str:
    """The server's own words: Ollama answers a failure with {"error": "…"}."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        found = json.loads(text)
    except ValueError:
        return text
    error = found.get("error") if isinstance(found, dict) else None
    return str(error) if error else text


def capabilities_of(body: bytes) -> list[str]:
    """The `capabilities` list of an `/api/show` answer (older servers send none)."""
    found = json.loads(body)
    listed = found.get("capabilities") if isinstance(found, dict) else None
    return [str(c) for c in listed] if isinstance(listed, list) else []

