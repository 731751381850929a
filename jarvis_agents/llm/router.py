"""One ChatModel for every provider: a model's name says which serves it (docs/api.md §6).

`NAME` is the `JARVIS_PROVIDER`'s, `ollama/NAME` Ollama's at `OLLAMA_HOST`,
`openai/NAME` the OpenAI-compatible server's at `OPENAI_BASE_URL`. Any other first
segment is part of an Ollama name: `hf.co/x/y` and `library/llama3.2` are Ollama's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from jarvis_agents.config import PROVIDERS, Settings
from jarvis_agents.errors import ModelError
from jarvis_agents.llm.base import (
    Capabilities,
    ChatReply,
    ChatRequest,
    Closing,
    OnDelta,
    PingResult,
)
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.llm.openai_compatible import OpenAIChatModel, not_configured

Provider = OllamaChatModel | OpenAIChatModel


def split_model(name: str, *, default_provider: str = "ollama") -> tuple[str, str]:
    """(provider, the name its server knows) for a model's name as an agent gives it."""
    first, slash, rest = name.partition("/")
    if slash and first in PROVIDERS:
        if not rest:
            raise ModelError(f"the model '{name}' names no model after '{first}/'")
        return first, rest
    if slash:
        return "ollama", name
    return default_provider, name


class ModelRouter(Closing):
    """ChatModel that hands each call to the provider its model's name says."""

    def __init__(
        self, *, ollama: OllamaChatModel, openai: OpenAIChatModel | None = None,
        default_provider: str = "ollama",
    ) -> None:
        if default_provider not in PROVIDERS:
            raise ValueError(f"default_provider must be one of {PROVIDERS}, not {default_provider!r}")
        self.ollama = ollama
        self.openai = openai
        self.default_provider = default_provider

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelRouter:
        openai = OpenAIChatModel.from_settings(settings) if settings.openai_base_url else None
        return cls(ollama=OllamaChatModel.from_settings(settings), openai=openai,
                   default_provider=settings.provider)

    def route(self, model: str) -> tuple[Provider, str]:
        """The provider of `model`, and the name its server knows it by."""
        provider, name = split_model(model, default_provider=self.default_provider)
        if provider == "ollama":
            return self.ollama, name
        if self.openai is None:
            raise not_configured(f"the model '{model}'")
        return self.openai, name

    # --- the ChatModel protocol ------------------------------------------------------

    def complete(
        self,
        request: ChatRequest,
        *,
        deadline: float,
        should_stop: Callable[[], bool],
        on_delta: OnDelta | None = None,
    ) -> ChatReply:
        provider, name = self.route(request.model)
        return provider.complete(replace(request, model=name), deadline=deadline,
                                 should_stop=should_stop, on_delta=on_delta)

    def capabilities(
        self, model: str, *, deadline: float, should_stop: Callable[[], bool]
    ) -> Capabilities:
        provider, name = self.route(model)
        return provider.capabilities(name, deadline=deadline, should_stop=should_stop)

    def forget(self, model: str) -> None:
        """Forget what this process keeps of `model`: what its server said it can do."""
        try:
            provider, name = split_model(model, default_provider=self.default_provider)
        except ModelError:  # a name no server could have: nothing was kept of it
            return
        if provider == "ollama":
            self.ollama.forget(name)

    # --- readiness and lifetime ------------------------------------------------------

    def ping(self, *, timeout_s: float = 2.0) -> dict[str, PingResult]:
        """Each configured provider's readiness, by provider name."""
        found = {"ollama": self.ollama.ping(timeout_s=timeout_s)}
        if self.openai is not None:
            found["openai"] = self.openai.ping(timeout_s=timeout_s)
        return found

    def close(self) -> None:
        self.ollama.close()
        if self.openai is not None:
            self.openai.close()
