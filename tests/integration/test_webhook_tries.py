"""Webhook tries against real receivers that misbehave: one that trickles its answer,
one user's many of them beside another user's healthy one, a delivery that fails every
try, and a worker process holding more descriptors than select() can watch."""

from __future__ import annotations

import os
import resource
import ssl
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import trustme

from jarvis_agents.lifecycle import AgentStatus, utcnow
from jarvis_agents.store.outbox import LEASE_RAN_OUT
from jarvis_agents.store.repository import Repository
from jarvis_agents.webhooks.dispatcher import LEASE_S, PER_USER, WebhookDispatcher
from jarvis_agents.webhooks.sender import TRY_DEADLINE_S, WebhookSender
from tests.faults.conftest import wait_until
from tests.support.webhook_outbox import Clock, complete, dispatcher, owed, running, settings
from tests.support.webhook_receiver import TRICKLE, WebhookReceiver

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


# --- a try's deadline ---------------------------------------------------------------------------


def test_a_trickling_receiver_s_try_ends_at_the_deadline(repository: Repository) -> None:
    # A byte a second: no read ever waits 5 s, yet the answer's head would take 72 s.
    with WebhookReceiver(script=[TRICKLE], trickle_s=1.0) as slow:
        agent = running(repository, slow.url)
        assert complete(repository, agent)
        sending = dispatcher(repository, Clock())
        outcomes: list[str] = []
        sending.outcomes = outcomes.append
        assert sending.send_due() == 1
        (request,) = slow.requests
        assert request.answered == TRICKLE
    (row,) = owed(repository, agent)
    assert row["delivered_at"] is None and row["attempts"] == 1
    assert row["last_error"] == f"timed out: no answer within {TRY_DEADLINE_S:g} s"
    # The try's own record: it lasted its deadline, and not much more.
    assert TRY_DEADLINE_S * 1000 <= row["last_try_ms"] <= (TRY_DEADLINE_S + 2) * 1000
    assert outcomes == ["failed"]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_a_trickling_receiver_over_tls_is_cut_at_the_deadline_too(ca: trustme.CA) -> None:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    sender = WebhookSender(allow_private=True, verify=client, deadline_s=1.5)
    with WebhookReceiver(script=[TRICKLE, 200], trickle_s=0.25, tls=server) as slow:
        try:
            cut = sender.post(slow.url, b"{}", {"webhook-id": "w"})
            then = sender.post(slow.url, b"{}", {"webhook-id": "w"})
        finally:
            sender.close()
    assert (cut.delivered, cut.error) == (False, "timed out: no answer within 1.5 s")
    assert 1.5 <= cut.seconds < 3.5
    assert then.delivered, then.error  # a new connection: the cut one is never reused


# --- one user's receivers and another's -----------------------------------------------------------


def test_one_user_s_trickling_receivers_delay_no_other_user_s_webhook(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    many = 3 * PER_USER
    with WebhookReceiver(script=[TRICKLE] * many, trickle_s=1.0) as slow:
        first = running(repository, slow.url)
        for agent in [first] + [running(repository, slow.url, user_id=first.user_id)
                                for _ in range(many - 1)]:
            assert complete(repository, agent)
        sending = WebhookDispatcher.from_settings(
            repository, settings(JARVIS_WEBHOOK_ALLOW_PRIVATE="1"))
        assert sending is not None
        sending.start()
        try:
            slow.wait_for(PER_USER, timeout_s=15)  # the first user's tries are under way
            other = running(repository, receiver.url)
            assert complete(repository, other)

            def delivered() -> bool:
                return owed(repository, other)[0]["delivered_at"] is not None

            # Well within one try's deadline: it waits for none of the trickling tries.
            wait_until(delivered, TRY_DEADLINE_S / 2, "the other user's webhook")
            # Each of that worker's senders the first user may hold, they hold: no more.
            assert len(slow.requests) == PER_USER
        finally:
            sending.stop(timeout_s=0)
    (request,) = receiver.wait_for(1, timeout_s=1)
    assert request.header("webhook-id") == str(owed(repository, other)[0]["id"])


# --- a delivery that fails every try ---------------------------------------------------------------


def test_a_last_try_whose_worker_died_makes_the_delivery_dead(repository: Repository) -> None:
    agent = running(repository)
    assert complete(repository, agent)
    clock = Clock()
    sending = dispatcher(repository, clock, JARVIS_WEBHOOK_RETRY_DELAYS="1,2")  # 3 tries
    outcomes: list[str] = []  # what jarvis_webhook_deliveries_total counts
    sending.outcomes = outcomes.append
    for attempt in (1, 2, 3):
        ((delivery, _),) = sending.claim(5)  # claimed, then its worker dies mid-try
        assert delivery.attempt == attempt
        clock.now += timedelta(seconds=LEASE_S + 1)
    assert sending.claim(5) == []  # the last try's lease ran out: dead, not tried a 4th time
    assert outcomes == ["dead"]
    (row,) = owed(repository, agent)
    assert row["abandoned_at"] is not None and row["delivered_at"] is None
    assert (row["attempts"], row["last_error"]) == (3, LEASE_RAN_OUT)
    clock.now += timedelta(days=1)
    assert sending.claim(5) == [] and sending.send_due() == 0  # never tried again
    assert outcomes == ["dead"]
    assert repository.get(agent.id).status is AgentStatus.COMPLETED  # type: ignore[union-attr]


# --- past select()'s descriptors ------------------------------------------------------------------


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """This process holding more than 1,100 descriptors, as a worker of 1,000 threads
    does: every socket opened meanwhile is numbered past select()'s 1023."""
    wanted = 1200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted + 100:
        pytest.skip(f"RLIMIT_NOFILE's hard limit ({hard}) is too low")
    if soft != resource.RLIM_INFINITY and soft < wanted + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted + 100, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(wanted)]
    try:
        yield
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_deliveries_past_descriptor_1023_succeed_on_a_kept_connection(
    repository: Repository, receiver: WebhookReceiver, many_descriptors: None,
) -> None:
    user_id = running(repository).user_id
    agents = [running(repository, receiver.url, user_id=user_id) for _ in range(3)]
    sending = dispatcher(repository, utcnow)
    try:
        for agent in agents:
            assert complete(repository, agent)
            assert sending.send_due() == 1
    finally:
        sending.sender.close()
    for agent in agents:
        (row,) = owed(repository, agent)
        assert row["delivered_at"] is not None, row["last_error"]
    assert len(receiver.wait_for(3, timeout_s=5)) == 3
    assert receiver.connections == 1  # the idle connection was found still open, and reused
    assert {uuid.UUID(r.header("X-Jarvis-Agent-Id") or "") for r in receiver.requests} == {
        a.id for a in agents}
