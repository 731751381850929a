"""The lender of one-connection clients the Ollama adapter reads replies with."""

from __future__ import annotations

import httpx

from jarvis_agents.llm.connections import ClientLender


def test_a_returned_client_is_lent_again_warmest_first() -> None:
    lender = ClientLender(httpx.Client)
    with lender.lend() as first, lender.lend() as second:
        assert first is not second
    with lender.lend() as again:
        assert again is first  # the last one given back
    assert lender.idle == 2
    lender.close()


def test_clients_beyond_max_idle_and_after_close_are_closed() -> None:
    lender = ClientLender(httpx.Client, max_idle=1)
    with lender.lend() as outer:
        with lender.lend() as inner:
            pass
        assert lender.idle == 1 and not inner.is_closed
    assert outer.is_closed  # no room left to keep it
    with lender.lend() as lent:
        assert lent is inner
        lender.close()
    assert lent.is_closed and lender.idle == 0


def test_clients_are_made_like_the_template() -> None:
    template = httpx.Client(
        base_url="http://127.0.0.1:11434", headers={"Authorization": "Bearer k"},
        timeout=httpx.Timeout(30, connect=5), follow_redirects=True,
    )
    lender = ClientLender.like(template)
    with lender.lend() as client:
        assert client.base_url == template.base_url
        assert client.headers["authorization"] == "Bearer k"
        assert client.timeout == template.timeout and client.follow_redirects
    lender.close()
    template.close()
