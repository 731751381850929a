"""How the model adapters' tests ask them for a reply (fixtures: ollama_fixtures.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from jarvis_agents.llm.base import ChatMessage, ChatModel, ChatRequest

CONVERSATION = [ChatMessage("system", "Answer in the ReACT format."), ChatMessage("user", "2+2?")]
REPLY = "THOUGHT: Easy.\nFINAL_ANSWER: 4"
PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                   "ALL_PROXY", "no_proxy", "NO_PROXY")


def ask(
    model: ChatModel,
    *,
    name: str = "llama3.2",
    timeout_s: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    stop: tuple[str, ...] = ("OBSERVATION:",),
) -> str:
    return model.complete(
        ChatRequest(CONVERSATION, model=name, stop=stop), deadline=time.monotonic() + timeout_s,
        should_stop=should_stop,
    ).content
