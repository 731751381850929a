"""Which server a model's name reaches (docs/api.md §6), what each model can do (asked
once), and whether the servers are ready: the router over both adapters, against the
test model server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ModelError, ModelNotFound
from jarvis_agents.llm.base import Capabilities, ChatRequest
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.llm.openai_compatible import OpenAIChatModel
from jarvis_agents.llm.router import ModelRouter
from tests.support.fake_ollama import FakeOllama
from tests.support.model_calls import USER, adapter, reply_to

pytest_plugins = ["tests.support.model_fixtures"]  # model_server, provider, chat_model

MODELS = ("llama3.2", "hf.co/bartowski/Qwen2.5-0.5B-GGUF", "meta-llama/Llama-3.2-1B", "plain")


@pytest.fixture
def router(model_server: FakeOllama) -> Iterator[ModelRouter]:
    model_server.models = list(MODELS)
    settings = Settings(database_url="sqlite://", redis_url=None, data_dir=Path("."),
                        ollama_host=model_server.url, openai_base_url=f"{model_server.url}/v1")
    with ModelRouter.from_settings(settings) as made:
        yield made


def ask_for(router: ModelRouter, model: str) -> str:
    return reply_to(router, ChatRequest([USER], model=model)).content  # type: ignore[arg-type]


@pytest.mark.parametrize(("model", "path", "served"), [
    ("llama3.2", "/api/chat", "llama3.2"),
    ("ollama/llama3.2", "/api/chat", "llama3.2"),
    ("openai/llama3.2", "/v1/chat/completions", "llama3.2"),
    ("openai/meta-llama/Llama-3.2-1B", "/v1/chat/completions", "meta-llama/Llama-3.2-1B"),
    ("hf.co/bartowski/Qwen2.5-0.5B-GGUF", "/api/chat", "hf.co/bartowski/Qwen2.5-0.5B-GGUF"),
    ("ollama/hf.co/bartowski/Qwen2.5-0.5B-GGUF", "/api/chat", "hf.co/bartowski/Qwen2.5-0.5B-GGUF"),
])
def test_a_models_prefix_picks_its_server(
    router: ModelRouter, model_server: FakeOllama, model: str, path: str, served: str
) -> None:
    assert ask_for(router, model) == "Sunny in both."
    assert model_server.endpoints == [path] and model_server.requests[0]["model"] == served


def test_a_name_without_prefix_is_the_configured_providers(
    router: ModelRouter, model_server: FakeOllama
) -> None:
    router.default_provider = "openai"
    ask_for(router, "plain")
    ask_for(router, "meta-llama/Llama-3.2-1B")  # any other first segment: an Ollama name
    assert model_server.endpoints == ["/v1/chat/completions", "/api/chat"]


def test_an_openai_model_without_a_server_configured_names_the_variable(
    model_server: FakeOllama,
) -> None:
    with ModelRouter(ollama=OllamaChatModel(host=model_server.url)) as router:
        with pytest.raises(ModelError, match="set OPENAI_BASE_URL") as missing:
            ask_for(router, "openai/gpt-4o-mini")
        with pytest.raises(ModelError, match="names no model after 'openai/'"):
            ask_for(router, "openai/")
    assert "'openai/gpt-4o-mini'" in str(missing.value) and model_server.call_count == 0


def test_readiness_covers_both_servers(router: ModelRouter, model_server: FakeOllama) -> None:
    ready = router.ping(timeout_s=2.0)
    assert ready["ollama"] == {"reachable": True, "error": None,
                               "models": [f"{m}:latest" for m in MODELS]}
    assert ready["openai"] == {"reachable": True, "error": None, "models": list(MODELS)}
    model_server.stop()
    down = router.ping(timeout_s=2.0)
    assert {name: (found["reachable"], found["error"]) for name, found in down.items()} == {
        "ollama": (False, "connection refused"), "openai": (False, "connection refused")}


# --- capabilities ----------------------------------------------------------------------


def capabilities(model: OllamaChatModel | OpenAIChatModel | ModelRouter, name: str) -> Capabilities:
    return model.capabilities(name, deadline=time.monotonic() + 5, should_stop=lambda: False)


def test_ollama_capabilities_are_asked_once_per_model(model_server: FakeOllama) -> None:
    model_server.capabilities = {"plain:latest": ["completion"],
                                 "llama3.2:latest": ["completion", "tools", "thinking"]}
    model_server.models = ["llama3.2", "plain"]
    with OllamaChatModel(host=model_server.url) as model:
        with ThreadPoolExecutor(8) as pool:
            found = list(pool.map(lambda _: capabilities(model, "llama3.2"), range(8)))
        assert found == [Capabilities(tools=True, thinking=True)] * 8
        assert capabilities(model, "plain") == Capabilities(tools=False)
        assert capabilities(model, "plain") == Capabilities(tools=False)
        with pytest.raises(ModelNotFound):
            capabilities(model, "nope")
    assert model_server.shows == ["llama3.2", "plain", "nope"]


def test_capabilities_through_the_router(router: ModelRouter, model_server: FakeOllama) -> None:
    model_server.capabilities = {"llama3.2:latest": ["completion", "tools"]}
    assert capabilities(router, "openai/anything") == Capabilities(tools=True)  # assumed
    assert capabilities(router, "ollama/llama3.2") == Capabilities(tools=True)
    assert model_server.shows == ["llama3.2"]


def test_asking_capabilities_of_a_server_that_is_down_is_cut_by_a_cancel(
    model_server: FakeOllama,
) -> None:
    model_server.stop()
    cancelled = threading.Event()
    with adapter("ollama", model_server.url, backoff_initial_s=5.0) as model:
        threading.Timer(0.2, cancelled.set).start()
        with pytest.raises(Cancelled):  # in the backoff between two attempts
            model.capabilities("llama3.2", deadline=time.monotonic() + 30,
                               should_stop=cancelled.is_set)
