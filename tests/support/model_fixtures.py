"""Both model adapters against one test model server, for tests that hold for each.

Used as a plugin: `pytest_plugins = ["tests.support.model_fixtures"]`. `chat_model` is
parametrized over the providers; `provider` says which one a test got. How the tests
make adapters and ask them for replies is in `tests.support.model_calls`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.model_calls import Adapter, adapter


@pytest.fixture
def model_server() -> Iterator[FakeOllama]:
    with FakeOllama(responder=lambda request: "Sunny in both.") as server:
        yield server


@pytest.fixture(params=["ollama", "openai"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def chat_model(provider: str, model_server: FakeOllama) -> Iterator[Adapter]:
    with adapter(provider, model_server.url) as made:
        yield made
