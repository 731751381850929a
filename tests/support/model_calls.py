"""How the model adapters' tests make an adapter and ask it for a reply (fixtures:
model_fixtures.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from jarvis_agents.llm.base import ChatMessage, ChatReply, ChatRequest, ToolSpec
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.llm.openai_compatible import OpenAIChatModel

Adapter = OllamaChatModel | OpenAIChatModel
CHAT_PATHS = {"ollama": "/api/chat", "openai": "/v1/chat/completions"}
USER = ChatMessage("user", "Weather in Paris and Tokyo?")
WEATHER = ToolSpec("getWeather", "Current weather for a city", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def adapter(provider: str, url: str, **options: float) -> Adapter:
    """An adapter of `provider` for the server at `url`, with millisecond backoffs."""
    options = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05, **options}
    if provider == "ollama":
        return OllamaChatModel(host=url, **options)  # type: ignore[arg-type]
    return OpenAIChatModel(base_url=f"{url}/v1", api_key="test", **options)  # type: ignore[arg-type]


def reply_to(
    model: Adapter,
    request: ChatRequest | None = None,
    *,
    timeout_s: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    deltas: list[str] | None = None,
) -> ChatReply:
    return model.complete(
        request or ChatRequest([USER], model="llama3.2"), deadline=time.monotonic() + timeout_s,
        should_stop=should_stop, on_delta=None if deltas is None else deltas.append)
