"""The model server's OpenAI protocol (`/v1/*`), as OpenAI and vLLM send it.

A streamed `/v1/chat/completions` reply is server-sent events: a first chunk with the
role, `reasoning_content` pieces (llama.cpp's and vLLM's reasoning field), `content`
pieces, each tool call's deltas (the first with its `index`, `id`, `type` and name,
then its arguments' text in pieces), a chunk with the `finish_reason`, with
`stream_options.include_usage` a last chunk whose `choices` is empty and whose
`usage` has the counts (the others carry `"usage": null`), then `data: [DONE]`.
Errors are `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from jarvis_agents.demo.replies import ToolCall, Turn, pieces, thirds


def models(names: list[str]) -> dict[str, Any]:
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "library"}
        for name in names]}


class OpenAIChat:
    """`POST /v1/chat/completions`."""

    content_type = "text/event-stream"

    @staticmethod
    def error(message: str, status: int) -> dict[str, Any]:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        if status == 429:
            kind = "rate_limit_exceeded"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    @staticmethod
    def not_found(model: str) -> dict[str, Any]:
        return {"error": {
            "message": f"The model `{model}` does not exist or you do not have access to it.",
            "type": "invalid_request_error", "param": None, "code": "model_not_found"}}

    @staticmethod
    def stops(request: dict[str, Any]) -> list[str]:
        stop = request.get("stop") or []
        return [stop] if isinstance(stop, str) else list(stop)

    @staticmethod
    def streamed(request: dict[str, Any]) -> bool:
        return bool(request.get("stream"))

    @staticmethod
    def whole(request: dict[str, Any], turn: Turn, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": _id(call), "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments_text()}}
                for call in turn.tool_calls]
        return {
            **_head(model, "chat.completion"), "choices": [{
                "index": 0, "message": message, "logprobs": None, "finish_reason": _finish(turn)}],
            "usage": _usage(request, turn),
        }

    @staticmethod
    def chunks(request: dict[str, Any], turn: Turn, model: str) -> list[bytes]:
        head = _head(model, "chat.completion.chunk")
        with_usage = bool((request.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            found = {**head, "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            return {**found, "usage": None} if with_usage else found

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"reasoning_content": piece}) for piece in pieces(turn.reasoning)]
        events += [chunk({"content": piece}) for piece in pieces(turn.text)]
        for index, call in enumerate(turn.tool_calls):
            events.append(chunk({"tool_calls": [{
                "index": index, "id": _id(call), "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}))
            events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                       for piece in thirds(call.arguments_text())]
        events.append(chunk({}, _finish(turn)))
        if with_usage:
            events.append({**head, "choices": [], "usage": _usage(request, turn)})
        return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _head(model: str, kind: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": kind, "created": int(time.time()),
            "model": model, "system_fingerprint": "fp_jarvis_demo"}


def _id(call: ToolCall) -> str:
    return call.id or f"call_{uuid.uuid4().hex[:12]}"


def _finish(turn: Turn) -> str:
    return "tool_calls" if turn.tool_calls else "stop"


def _usage(request: dict[str, Any], turn: Turn) -> dict[str, int]:
    used_in, used_out = turn.counted(request)
    return {"prompt_tokens": used_in, "completion_tokens": used_out,
            "total_tokens": used_in + used_out}
