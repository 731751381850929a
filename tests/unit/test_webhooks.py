"""Webhooks without a network: which addresses pass, how URLs parse, how tries are signed,
the retry schedule, a try's deadline over a socket pair, and the senders' turns by user."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from jarvis_agents.config import Settings
from jarvis_agents.errors import ConfigError, RequestError
from jarvis_agents.webhooks.addresses import (
    Resolver,
    check_webhook_url,
    is_public,
    parse_webhook_url,
    resolve_target,
)
from jarvis_agents.webhooks.deadlines import Deadlines
from jarvis_agents.webhooks.dispatcher import RETRY_DELAYS_S, retry_at
from jarvis_agents.webhooks.signing import Signer
from jarvis_agents.webhooks.turns import Turns

REFUSED = [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.1.1", "100.127.255.254",
    "169.254.169.254", "0.0.0.0", "224.0.0.1", "239.255.255.250", "240.0.0.1",
    "255.255.255.255", "192.0.2.1", "198.18.0.1", "::1", "::", "fe80::1", "fc00::1",
    "fd12:3456::1", "ff02::1", "2001:db8::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
    "::ffff:169.254.169.254", "64:ff9b::7f00:1", "2002:7f00:1::1", "2002:a9fe:a9fe::1",
]
PUBLIC = ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::1"]


@pytest.mark.parametrize("address", REFUSED)
def test_non_global_addresses_are_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_global_addresses_pass(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("url", [
    "http://example.com:10000/hook", "https://example.com:65535/x", "http://[2001:db8::1]:8443/x",
    "HTTPS://Example.COM/x", "http://exämple.com/", "http://user:pw@example.com/hook?a=1",
])
def test_valid_urls_parse(url: str) -> None:
    assert parse_webhook_url(url).scheme in {"http", "https"}


@pytest.mark.parametrize("url", [
    "ftp://example.com/", "http://", "http:///path", "http://example.com:65536/",
    "http://example.com:0/", "http://example.com:port/", "http://[zzz]/", "http://[::1/",
    "http://2001:db8::1/", "http://exa mple.com/", "http://ex%41mple.com/", "example.com/hook",
])
def test_invalid_urls_are_refused(url: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_webhook_url(url)
    assert refused.value.code == "invalid_webhook_url"


def fixed(*addresses: str) -> Resolver:
    """A resolver that answers these addresses for any name."""
    return lambda host, port: [ipaddress.ip_address(a) for a in addresses]


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_WEBHOOK_SECRET": "s", **env})


def test_a_public_name_on_a_high_port_is_accepted(tmp_path: Path) -> None:
    check_webhook_url("https://hooks.example.com:10443/x", settings(tmp_path),
                      resolver=fixed("93.184.215.14"))


def test_a_name_with_any_private_address_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestError, match=r"non-public address \(10\.0\.0\.7\)") as refused:
        check_webhook_url("https://hooks.example.com/x", settings(tmp_path),
                          resolver=fixed("93.184.215.14", "10.0.0.7"))
    assert refused.value.code == "webhook_url_not_allowed"


def test_a_name_that_does_not_resolve_is_refused(tmp_path: Path) -> None:
    def nowhere(host: str, port: int) -> list[ipaddress.IPv4Address]:
        raise OSError("Name or service not known")

    with pytest.raises(RequestError, match="does not resolve") as refused:
        check_webhook_url("https://nowhere.example/x", settings(tmp_path), resolver=nowhere)
    assert refused.value.code == "invalid_webhook_url"


def test_the_operator_can_allow_private_addresses(tmp_path: Path) -> None:
    allowed = settings(tmp_path, JARVIS_WEBHOOK_ALLOW_PRIVATE="1")
    check_webhook_url("http://127.0.0.1:9/x", allowed, resolver=fixed("127.0.0.1"))
    # Each try still connects to the address the name resolved to.
    target = resolve_target("http://receiver.test:8080/x", allow_private=True,
                            resolver=fixed("127.0.0.1"))
    assert str(target.url) == "http://127.0.0.1:8080/x"
    assert target.host_header == "receiver.test:8080"


def test_without_a_secret_webhooks_are_refused(tmp_path: Path) -> None:
    no_secret = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    with pytest.raises(RequestError, match="JARVIS_WEBHOOK_SECRET") as refused:
        check_webhook_url("https://hooks.example.com/x", no_secret, resolver=fixed("8.8.8.8"))
    assert refused.value.code == "webhooks_disabled"


def test_a_try_is_pinned_to_the_checked_address_and_keeps_the_name() -> None:
    target = resolve_target("https://hooks.example.com:8443/a?b=1", allow_private=False,
                            resolver=fixed("2606:4700:4700::1111", "93.184.215.14"))
    assert str(target.url) == "https://[2606:4700:4700::1111]:8443/a?b=1"
    assert (target.host_header, target.server_name) == ("hooks.example.com:8443", "hooks.example.com")
    literal = resolve_target("https://93.184.215.14/x", allow_private=False,
                             resolver=fixed("93.184.215.14"))
    assert literal.server_name is None and literal.host_header == "93.184.215.14"


WHSEC = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


@pytest.mark.parametrize("secret", ["plain-s3cret", WHSEC])
def test_every_try_is_signed_both_ways(secret: str) -> None:
    body = json.dumps({"id": "a", "status": "COMPLETED", "final_answer": "é"}).encode()
    delivery_id, agent_id = uuid.uuid4(), uuid.uuid4()
    now = datetime.now(UTC)
    headers = Signer(secret).headers(delivery_id=delivery_id, event="agent.completed",
                                     agent_id=agent_id, body=body, now=now)
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Jarvis-Event"] == "agent.completed"
    assert headers["X-Jarvis-Signature"] == (
        "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest())
    assert headers["webhook-id"] == str(delivery_id)
    assert headers["webhook-timestamp"] == str(int(now.timestamp()))
    # Standard Webhooks' own verifier, keyed as docs/api.md §9 says: the decoded rest of a whsec_
    # secret (its native form), or the bytes of any other.
    verifier = Webhook(secret if secret.startswith("whsec_") else secret.encode())
    assert verifier.verify(body, headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        verifier.verify(body + b" ", headers)
    raw_key = base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()
    expected = base64.b64encode(hmac.new(
        raw_key, f"{delivery_id}.{int(now.timestamp())}.".encode() + body, hashlib.sha256
    ).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"


def test_a_whsec_secret_must_carry_base64(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="JARVIS_WEBHOOK_SECRET"):
        settings(tmp_path, JARVIS_WEBHOOK_SECRET="whsec_not base64!")
    with pytest.raises(ConfigError, match="JARVIS_WEBHOOK_SECRET"):
        settings(tmp_path, JARVIS_WEBHOOK_SECRET="whsec_")


def test_the_retry_schedule_keeps_the_contract() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    first = retry_at(1, now)
    assert first is not None and first - now <= timedelta(seconds=10)  # first retry within 10 s
    tries, when, at = 1, now, []
    while (nxt := retry_at(tries, when)) is not None:
        tries, when = tries + 1, nxt
        at.append(nxt)
    assert tries >= 5 and when - now >= timedelta(minutes=5)  # ≥ 5 tries over ≥ 5 minutes
    assert tries == 1 + len(RETRY_DELAYS_S)
    assert at == sorted(at)


# --- a whole try's deadline ---------------------------------------------------------------------


def test_a_trickling_peer_is_cut_at_the_deadline_not_at_each_read() -> None:
    ours, theirs = socket.socketpair()
    deadlines = Deadlines()
    trickling = threading.Event()

    def trickle() -> None:  # a byte every 0.1 s: no single read waits long
        while not trickling.wait(0.1):
            try:
                theirs.send(b"x")
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    try:
        ours.settimeout(5)
        with deadlines.bounded(lambda: ours, 0.5) as watch:
            while ours.recv(1):  # as long as it trickles; b"" once shut down
                pass
        assert watch.expired
    finally:
        trickling.set()
        deadlines.close()
        ours.close()
        theirs.close()


# --- senders in turns, by user ------------------------------------------------------------------


def test_each_user_gets_at_most_its_share_of_tries_under_way() -> None:
    turns: Turns[str, int] = Turns(per_user=2)
    for number in range(4):
        turns.put("many", number)
    turns.put("one", 100)
    assert turns.full() == ["many"]  # 2 or more waiting: claim no more of theirs for now
    taken = [turns.take() for _ in range(3)]
    assert taken == [("many", 0), ("one", 100), ("many", 1)]  # in turns, oldest first
    assert turns.take() is None and not turns.startable()  # "many" has its 2 under way
    assert turns.full() == ["many"] and len(turns) == 2
    turns.done("many")
    assert turns.startable() and turns.take() == ("many", 2)
    assert turns.full() == [] and len(turns) == 1  # 1 waiting: claim more of theirs
    turns.done("one")
    assert turns.drain() == [3] and len(turns) == 0 and turns.take() is None


def test_a_user_with_room_is_served_before_one_served_just_now() -> None:
    turns: Turns[str, str] = Turns(per_user=4)
    for item in ("a1", "a2", "a3"):
        turns.put("a", item)
    for item in ("b1", "b2"):
        turns.put("b", item)
    assert [turns.take() for _ in range(5)] == [
        ("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3")]
