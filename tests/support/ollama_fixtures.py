"""The Ollama adapter against a FakeOllama, for its tests.

Used as a plugin: `pytest_plugins = ["tests.support.ollama_fixtures"]`; how the tests
ask for a reply is in `tests.support.ollama_calls`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jarvis_agents.llm.ollama import OllamaChatModel
from tests.support.fake_ollama import FakeOllama
from tests.support.ollama_calls import PROXY_VARIABLES, REPLY


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(responder=lambda request: REPLY) as server:
        yield server


@pytest.fixture
def model(fake: FakeOllama) -> Iterator[OllamaChatModel]:
    # Millisecond backoffs keep retry tests fast; the policy is the production one.
    with OllamaChatModel(host=fake.url, backoff_initial_s=0.01, backoff_max_s=0.05) as chat_model:
        yield chat_model


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the environment's proxy variables, whatever the machine has."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
