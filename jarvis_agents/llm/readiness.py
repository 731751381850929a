"""Whether a model can be served: its provider's server answers, and has it.

Asked of the default model by `/readyz` and by `jarvis-agents up`, and of each create's
model by the API (`KnownModels`). The provider is the one the model's name says
(docs/api.md §6): an `openai/…` model, or any model when `JARVIS_PROVIDER` is `openai`, is
checked on the OpenAI-compatible server, never on Ollama. Either way the server is
asked the one way, for the list of what it serves (`ping`: Ollama's `/api/tags`, the
OpenAI `/models`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from jarvis_agents.config import Settings
from jarvis_agents.errors import ModelError, RequestError
from jarvis_agents.llm.base import Closing, PingResult
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.llm.openai_compatible import OpenAIChatModel
from jarvis_agents.llm.router import ModelRouter, split_model

# How long the API takes a server's list of models for the truth (README, Models).
KNOWN_MODELS_TTL_S = 60.0


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
    return ModelReadiness(model, name, provider, server.server, found["reachable"],
                          is_listed(provider, name, found["models"]), found["error"])


def is_listed(provider: str, name: str, listed: Iterable[str]) -> bool:
    """Whether `name` is among the models a server listed ("llama3.2" is Ollama's
    "llama3.2:latest")."""
    if provider != "ollama":
        return name in set(listed)
    return name.removesuffix(":latest") in {m.removesuffix(":latest") for m in listed}


class KnownModels(Closing):
    """Refuses a create whose model its server does not have, as far as the server says.

    Each provider's list of models is asked for at most once per `ttl_s` (callers at
    once wait for the one answer) and kept: whatever names creates give, the cache
    holds one list per provider and the servers see one request a minute. A server
    that does not answer cannot tell: the create goes ahead, as does one of a
    provider with no server configured (the agent then fails saying so).
    """

    def __init__(
        self, router: ModelRouter, *, ttl_s: float = KNOWN_MODELS_TTL_S, timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._router = router
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._lists: dict[str, tuple[float, PingResult]] = {}  # provider → (asked at, list)
        self._asking = {provider: threading.Lock() for provider in ("ollama", "openai")}

    @classmethod
    def from_settings(cls, settings: Settings) -> KnownModels:
        return cls(ModelRouter.from_settings(settings))

    def check(self, model: str) -> None:
        """RequestError (`unknown_model`) naming the model and its server when that server
        lists its models and `model` is not among them."""
        try:
            server, name = self._router.route(model)
        except ModelError:
            return  # no server to ask
        provider = "ollama" if isinstance(server, OllamaChatModel) else "openai"
        found = self._list(provider, server)
        if found["reachable"] and not is_listed(provider, name, found["models"]):
            pull = f"; pull it with `ollama pull {name}`" if provider == "ollama" else ""
            raise RequestError(
                f"the model '{model}' is not available on {_without_secrets(server)}"
                f"{pull} or choose another model", code="unknown_model")

    def close(self) -> None:
        self._router.close()

    def _list(self, provider: str, server: OllamaChatModel | OpenAIChatModel) -> PingResult:
        with self._asking[provider]:
            kept = self._lists.get(provider)
            if kept is not None and self._clock() - kept[0] < self._ttl_s:
                return kept[1]
            found = server.ping(timeout_s=self._timeout_s)
            self._lists[provider] = (self._clock(), found)
            return found


def _without_secrets(server: OllamaChatModel | OpenAIChatModel) -> str:
    """"the Ollama server at https://host/path", less any credentials or query in its URL."""
    url = urlsplit(server.host if isinstance(server, OllamaChatModel) else server.base_url)
    host = f"[{url.hostname}]" if ":" in (url.hostname or "") else url.hostname
    port = f":{url.port}" if url.port else ""
    kind = "Ollama server" if isinstance(server, OllamaChatModel) else "OpenAI-compatible server"
    return f"the {kind} at {url.scheme}://{host}{port}{url.path}"
