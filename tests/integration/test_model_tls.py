"""Model servers over HTTPS, with both adapters: a certificate of the CA named by
SSL_CERT_FILE is trusted, another is refused with an error a person can act on, a call
goes through an HTTPS_PROXY's CONNECT tunnel, and OLLAMA_API_KEY is sent as a bearer
token (README, Models)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from jarvis_agents.errors import ModelError
from tests.support.connect_proxy import connect_proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.model_calls import adapter, reply_to
from tests.support.ollama_calls import PROXY_VARIABLES

pytestmark = pytest.mark.integration
PROVIDERS = ["ollama", "openai"]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy and no CA bundle from the machine's environment."""
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR", "OLLAMA_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def https_server(ca: trustme.CA) -> FakeOllama:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return FakeOllama(host="127.0.0.1", responder=lambda request: "Sunny in both.", tls=context)


@pytest.fixture
def server(ca: trustme.CA) -> Iterator[FakeOllama]:
    with https_server(ca) as made:
        yield made


@pytest.fixture
def trusted(env: pytest.MonkeyPatch, ca: trustme.CA, tmp_path: Path) -> pytest.MonkeyPatch:
    """SSL_CERT_FILE names a bundle with the test CA, as a user with their own CA does."""
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    env.setenv("SSL_CERT_FILE", str(bundle))
    return env


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_whose_ca_is_in_ssl_cert_file_is_spoken_to(
    trusted: pytest.MonkeyPatch, server: FakeOllama, provider: str
) -> None:
    with adapter(provider, server.url) as model:
        assert reply_to(model).content == "Sunny in both."
        assert reply_to(model).content == "Sunny in both."
        found = model.ping()  # readiness and the create's check of the model
    assert found["reachable"] and "llama3.2" in {m.removesuffix(":latest") for m in found["models"]}
    assert server.connections == 2  # one kept for the calls, one for the listing


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_certificate_nobody_vouches_for_is_refused_saying_so(
    env: pytest.MonkeyPatch, server: FakeOllama, provider: str
) -> None:
    with adapter(provider, server.url) as model, pytest.raises(ModelError) as refused:
        reply_to(model)
    assert str(refused.value) == (
        "the certificate of 127.0.0.1 is not trusted (unable to get local issuer certificate); "
        "if your own CA signed it, point SSL_CERT_FILE at a bundle of CA certificates that "
        "includes it")
    assert server.connections == 1 and server.call_count == 0  # not retried: it cannot change
    assert "certificate verify failed" in str(model.ping()["error"])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_https_server_is_reached_through_the_proxys_tunnel(
    trusted: pytest.MonkeyPatch, server: FakeOllama, provider: str
) -> None:
    with connect_proxy() as proxy:
        trusted.setenv("HTTPS_PROXY", proxy.url)
        url = server.url.replace("127.0.0.1", "localhost")  # a name only the proxy resolves
        with adapter(provider, url) as model:
            assert reply_to(model).content == "Sunny in both."
            assert model.ping()["reachable"]
    assert proxy.tunnels[0] == f"CONNECT localhost:{server.port} HTTP/1.1"
    assert len(proxy.tunnels) == 2  # the call's, then the listing's: nothing went around it


def test_ollama_api_key_is_sent_as_a_bearer_token(
    trusted: pytest.MonkeyPatch, server: FakeOllama
) -> None:
    trusted.setenv("OLLAMA_API_KEY", "k-123")
    with adapter("ollama", server.url) as model:
        reply_to(model)
        model.ping()
    assert server.authorizations == ["Bearer k-123"] * 2  # the chat, then the listing
