"""A create whose model its server does not have is a 400 where the API can ask the server:
the server's list of models, asked at most once a minute per provider, against the
test model server over real HTTP; then through a real API process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jarvis_agents.errors import RequestError
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.llm.openai_compatible import OpenAIChatModel
from jarvis_agents.llm.readiness import KnownModels
from jarvis_agents.llm.router import ModelRouter
from tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[FakeOllama]:
    with FakeOllama(models=["llama3.2", "qwen2.5:7b"]) as made:
        yield made


def known_models(url: str, clock: Clock) -> KnownModels:
    router = ModelRouter(ollama=OllamaChatModel(host=url),
                         openai=OpenAIChatModel(base_url=f"{url}/v1"))
    return KnownModels(router, clock=clock)


def test_an_unknown_model_is_refused_naming_it_and_its_server(server: FakeOllama) -> None:
    with known_models(server.url, Clock()) as known:
        for model in ("llama3.2", "llama3.2:latest", "ollama/qwen2.5:7b", "openai/llama3.2"):
            known.check(model)
        with pytest.raises(RequestError) as refused:
            known.check("llama9")
        assert refused.value.code == "unknown_model" and refused.value.status == 400
        assert str(refused.value) == (
            f"the model 'llama9' is not available on the Ollama server at {server.url}; "
            "pull it with `ollama pull llama9` or choose another model")
        with pytest.raises(RequestError, match=(
                "^the model 'openai/gpt-9' is not available on the OpenAI-compatible server "
                f"at {server.url}/v1 or choose another model$")):
            known.check("openai/gpt-9")


def test_each_servers_list_is_asked_once_a_minute_whatever_the_names(server: FakeOllama) -> None:
    clock = Clock()
    with known_models(server.url, clock) as known:
        for name in ["llama3.2", *(f"junk-{i}" for i in range(50))]:
            try:
                known.check(name)
            except RequestError:
                pass
        known.check("openai/llama3.2")
        assert server.listings == ["/api/tags", "/v1/models"]
        server.models.append("llama9")  # pulled meanwhile: seen once the minute is over
        clock.now += 59
        with pytest.raises(RequestError):
            known.check("llama9")
        clock.now += 2
        known.check("llama9")
        assert server.listings == ["/api/tags", "/v1/models", "/api/tags"]


def test_a_server_that_does_not_answer_cannot_tell(server: FakeOllama) -> None:
    server.stop()
    with known_models(server.url, Clock()) as known:
        known.check("llama9")  # the agent will fail on its worker if need be
        known.check("openai/gpt-9")
    with KnownModels(ModelRouter(ollama=OllamaChatModel(host=server.url))) as known:
        known.check("openai/gpt-9")  # no OpenAI-compatible server is configured at all


def test_the_api_refuses_an_unknown_model_and_takes_a_known_one(api_env, start_api, fake_ollama):
    api = start_api(api_env)
    with api.client(api.user()) as http:
        refused = http.post("/api/v1/agents", json={"goal": "x", "model": "llama9"})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "unknown_model" and "'llama9'" in error["message"]
        assert http.post("/api/v1/agents", json={"goal": "x", "model": "test-model"}).status_code == 202
        assert http.post("/api/v1/agents", json={"goal": "x"}).status_code == 202  # llama3.2
    assert fake_ollama.listings == ["/api/tags"]


def test_the_api_takes_any_model_when_its_server_is_down(shared_api):
    api = shared_api()  # its OLLAMA_HOST is a port nobody listens on
    with api.client(api.user()) as http:
        assert http.post("/api/v1/agents", json={"goal": "x", "model": "llama9"}).status_code == 202
