"""Whether the default model can be served: its provider's server answers, and has it.

Asked by `/readyz` and by `jarvis-agents up`. The provider is the one the model's
name says (CONTRACT §6): an `openai/…` model, or any model when `JARVIS_PROVIDER`
is `openai`, is checked on the OpenAI-compatible server, never on Ollama.
"""

from __future__ import annotations

from dataclasses import dataclass

from jarvis_agents.config import Settings
from jarvis_agents.errors import ModelError
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.llm.openai_compatible import OpenAIChatModel
from jarvis_agents.llm.router import split_model


@dataclass(frozen=True)
class ModelReadiness:
    """What one look at the default model's server found."""

    model: str  # as agents name it, e.g. "llama3.2" or "openai/gpt-4o-mini"
    name: str  # as its server names it, e.g. "gpt-4o-mini"
    provider: str  # "ollama" or "openai"
    server: str  # "the Ollama server at http://…", for sentences
    reachable: bool
    available: bool  # pulled (Ollama) or listed (OpenAI-compatible)
    error: str | None


def default_provider(settings: Settings) -> str:
    """The provider of the default model: "ollama" or "openai"."""
    try:
        return split_model(settings.model, default_provider=settings.provider)[0]
    except ModelError:  # "openai/" names no model: it is still the OpenAI server's
        return settings.model.partition("/")[0]


def check_default_model(settings: Settings, *, timeout_s: float = 2.0) -> ModelReadiness:
    """Ask the default model's server (one request, at most `timeout_s`) what it serves."""
    model = settings.model
    provider = default_provider(settings)
    try:
        name = split_model(model, default_provider=settings.provider)[1]
    except ModelError as exc:
        return ModelReadiness(model, model, provider, "no server", False, False, str(exc))
    if provider == "openai" and not settings.openai_base_url:
        return ModelReadiness(model, name, provider, "no OpenAI-compatible server", False, False,
                              "OPENAI_BASE_URL is not set")
    server: OllamaChatModel | OpenAIChatModel
    if provider == "openai":
        server = OpenAIChatModel.from_settings(settings)
    else:
        server = OllamaChatModel.from_settings(settings)
    with server:
        found = server.ping(timeout_s=timeout_s)
    listed = set(found["models"])
    wanted = name
    if provider == "ollama":  # "llama3.2" is "llama3.2:latest"
        listed |= {m.removesuffix(":latest") for m in listed}
        wanted = name.removesuffix(":latest")
    return ModelReadiness(model, name, provider, server.server, found["reachable"],
                          wanted in listed, found["error"])
