"""`webhook_url` at create time, over HTTP: parsed by a URL parser (any valid port, IPv6
literals), then refused when it reaches a non-global address (docs/api.md §2, §9).

Literal addresses only: this machine (and CI's) has no DNS for public names; names are
checked with a fake resolver in tests/unit/test_webhooks.py and, at delivery, in
tests/integration/test_webhook_outbox.py.
"""

from __future__ import annotations

import pytest

from tests.integration.test_api_errors import assert_error

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api

AGENTS = "/api/v1/agents"


@pytest.mark.parametrize("url", [
    "http://100.64.1.1/hook",  # shared address space (carrier-grade NAT)
    "http://169.254.169.254/latest/meta-data/",  # link-local: cloud metadata
    "http://[::1]:8080/hook",
    "http://[::ffff:127.0.0.1]/hook",  # loopback, IPv4-mapped
    "http://[2001:db8::1]:8443/x",  # valid syntax; a documentation address
    "http://0.0.0.0:8080/hook",
])
def test_a_non_global_address_is_refused(shared_api, url: str) -> None:
    api = shared_api(JARVIS_WEBHOOK_SECRET="s3cret")
    with api.client(api.user()) as http:
        refused = assert_error(http.post(AGENTS, json={"goal": "x", "webhook_url": url}),
                               400, "webhook_url_not_allowed")
    assert "non-public address" in refused["message"]


@pytest.mark.parametrize("url", [
    "http://93.184.215.14:10443/hook",  # a port from 10000 up
    "https://[2606:4700:4700::1111]:8443/hook",  # an IPv6 literal of a public address
])
def test_a_public_address_on_any_port_or_in_ipv6_is_accepted(shared_api, url: str) -> None:
    api = shared_api(JARVIS_WEBHOOK_SECRET="s3cret")
    with api.client(api.user()) as http:
        created = http.post(AGENTS, json={"goal": "x", "webhook_url": url})
        assert created.status_code == 202, created.text
        assert created.json()["webhook_url"] == url
        http.delete(created.headers["Location"])


@pytest.mark.parametrize("url", [
    "http://example.com:65536/hook", "http://[not-an-address]/hook", "http://exa mple.com/",
])
def test_a_malformed_url_is_a_400(shared_api, url: str) -> None:
    api = shared_api(JARVIS_WEBHOOK_SECRET="s3cret")
    with api.client(api.user()) as http:
        assert_error(http.post(AGENTS, json={"goal": "x", "webhook_url": url}),
                     400, "invalid_request")
