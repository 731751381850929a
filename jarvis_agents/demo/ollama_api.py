"""The model server's Ollama protocol (`/api/*`), as Ollama sends it.

Shapes from Ollama's `api/types.go`: a streamed `/api/chat` reply is NDJSON, one
object per piece (`message.thinking`, then `message.content`, then each tool call
as `message.tool_calls: [{"id"?, "function": {"index", "name", "arguments": {…}}}]`),
then the `done` line with the counts; errors are `{"error": "…"}`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from jarvis_agents.demo.replies import Turn, pieces

CAPABILITIES = ("completion",)  # a test that wants tool calling names its model's


def with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def model_entry(name: str) -> dict[str, Any]:
    return {
        "name": with_tag(name), "model": with_tag(name), "modified_at": now(),
        "size": 2_019_393_189, "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
    }


def show(name: str, capabilities: list[str]) -> dict[str, Any]:
    return {
        "modelfile": f"FROM {name}", "parameters": "", "template": "{{ .Prompt }}",
        "details": {"format": "gguf", "family": "llama"}, "model_info": {},
        "capabilities": capabilities, "modified_at": now(),
    }


class OllamaChat:
    """`POST /api/chat`."""

    content_type = "application/x-ndjson"

    @staticmethod
    def error(message: str, status: int) -> dict[str, Any]:
        return {"error": message}

    @staticmethod
    def not_found(model: str) -> dict[str, Any]:
        return {"error": f'model "{model}" not found, try pulling it first'}

    @staticmethod
    def stops(request: dict[str, Any]) -> list[str]:
        return list((request.get("options") or {}).get("stop") or [])

    @staticmethod
    def streamed(request: dict[str, Any]) -> bool:
        return request.get("stream", True) is not False

    @staticmethod
    def whole(request: dict[str, Any], turn: Turn, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.reasoning:
            message["thinking"] = turn.reasoning
        if turn.tool_calls:
            message["tool_calls"] = [_call(i, call) for i, call in enumerate(turn.tool_calls)]
        return {**_done(request, turn, model), "message": message}

    @staticmethod
    def chunks(request: dict[str, Any], turn: Turn, model: str) -> list[bytes]:
        base = {"model": model, "created_at": now(), "done": False}
        lines = [{**base, "message": {"role": "assistant", "content": "", "thinking": piece}}
                 for piece in pieces(turn.reasoning)]
        lines += [{**base, "message": {"role": "assistant", "content": piece}}
                  for piece in pieces(turn.text)]
        lines += [{**base, "message": {"role": "assistant", "content": "",
                                       "tool_calls": [_call(i, call)]}}
                  for i, call in enumerate(turn.tool_calls)]
        lines.append(_done(request, turn, model))
        return [json.dumps(line).encode() + b"\n" for line in lines]


def _call(index: int, call: Any) -> dict[str, Any]:
    arguments = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
    found: dict[str, Any] = {"function": {"index": index, "name": call.name, "arguments": arguments}}
    if call.id is not None:
        found = {"id": call.id, **found}
    return found


def _done(request: dict[str, Any], turn: Turn, model: str) -> dict[str, Any]:
    used_in, used_out = turn.counted(request)
    return {
        "model": model, "created_at": now(), "message": {"role": "assistant", "content": ""},
        "done": True, "done_reason": "stop", "total_duration": 1_000_000, "load_duration": 0,
        "prompt_eval_count": used_in, "eval_count": used_out,
    }
