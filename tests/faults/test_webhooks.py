"""Webhooks from real worker processes: each end is delivered once, signed both ways, and a
worker SIGKILLed between the commit and the delivery, or during the retries, loses none."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks import Webhook

from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.service import CreateRequest
from jarvis_agents.webhooks.dispatcher import PERIOD_S
from tests.faults.conftest import System
from tests.support.webhook_receiver import HANG, Received, WebhookReceiver

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.long]

PLAIN = "s3cret-plain"
WHSEC = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
# The workers' lease and first retry, shortened from 20 s and 5 s: what a dead worker
# owes is taken over, and a failed try retried, as it would be after the defaults.
LEASE_S = 4.0
FIRST_RETRY_S = 2.0
# Longest a delivery owed by a dead worker waits for a new one's dispatcher: the lease,
# a period, and the new worker's start-up.
TAKEN_OVER_S = LEASE_S + PERIOD_S + 30


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


def webhook_env(system: System, secret: str | None = PLAIN) -> dict[str, str]:
    env = {**system.env, "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1",  # the receiver is on loopback
           "JARVIS_WEBHOOK_LEASE": str(LEASE_S),
           "JARVIS_WEBHOOK_RETRY_DELAYS": f"{FIRST_RETRY_S},30,60,120,300"}
    if secret is not None:
        env["JARVIS_WEBHOOK_SECRET"] = secret
    return env


def create(system: System, url: str, **fields: Any) -> uuid.UUID:
    agent, _ = system.service.create(
        system.user_id, CreateRequest(goal="What is 1234 * 902?", webhook_url=url, **fields))
    return agent.id


def deliveries(system: System, agent_id: uuid.UUID) -> list[dict[str, Any]]:
    return system.repository.outbox.of_agent(agent_id)


def delivered(system: System, agent_id: uuid.UUID) -> bool:
    return any(d["delivered_at"] is not None for d in deliveries(system, agent_id))


def assert_signed(request: Received, secret: str) -> dict[str, Any]:
    """Both signatures hold; returns the body (the agent JSON)."""
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(request.header("X-Jarvis-Signature") or "", expected)
    assert request.header("Content-Type") == "application/json"
    verifier = Webhook(secret if secret.startswith("whsec_") else secret.encode())
    return verifier.verify(request.body, request.headers)  # type: ignore[no-any-return]


@pytest.mark.parametrize("secret", [PLAIN, WHSEC], ids=["plain-secret", "whsec-secret"])
def test_each_end_is_delivered_once_with_its_event_and_signatures(
    system: System, start_worker: Any, receiver: WebhookReceiver, secret: str,
) -> None:
    env = webhook_env(system, secret)
    # Cancelled while no worker runs: still PENDING, the cancel's commit owes its webhook.
    cancelled = create(system, receiver.url)
    system.service.cancel(system.user_id, cancelled)
    start_worker(env)
    completed = create(system, receiver.url)
    failed = create(system, receiver.url, max_steps=1)  # the step limit: FAILED
    ends = {completed: ("COMPLETED", "agent.completed"), failed: ("FAILED", "agent.failed"),
            cancelled: ("CANCELLED", "agent.cancelled")}
    for agent_id in ends:
        system.wait_until(lambda a=agent_id: delivered(system, a), 30, f"the webhook of {agent_id}")
    requests = receiver.wait_for(3, timeout_s=5)
    assert len(receiver.requests) == 3  # all recorded as delivered: nothing more will come
    for request in requests:
        body = assert_signed(request, secret)
        agent_id = uuid.UUID(body["id"])
        status, event = ends.pop(agent_id)
        assert body["status"] == status and request.header("X-Jarvis-Event") == event
        (delivery,) = deliveries(system, agent_id)
        assert request.header("webhook-id") == str(delivery["id"])
        assert delivery["attempts"] == 1 and delivery["event"] == event
    assert ends == {}  # each agent once


def kill(process: Any) -> None:
    process.signal(signal.SIGKILL)
    process.proc.wait(10)


@pytest.mark.parametrize("moment", ["while-the-first-try-hangs", "before-any-try"])
def test_a_worker_killed_between_the_commit_and_the_delivery_loses_nothing(
    system: System, start_worker: Any, receiver: WebhookReceiver, moment: str,
) -> None:
    env = webhook_env(system)
    if moment == "while-the-first-try-hangs":
        receiver.script = [HANG]
        first = start_worker(env)
        agent_id = create(system, receiver.url)
        receiver.wait_for(1, timeout_s=30)  # the try is in flight, unanswered
    else:
        # A worker with no secret runs no dispatcher: the webhook stays owed, never tried.
        first = start_worker(webhook_env(system, secret=None))
        agent_id = create(system, receiver.url)
        system.terminal(agent_id)
    assert system.repository.get(agent_id).status is AgentStatus.COMPLETED  # type: ignore[union-attr]
    assert not delivered(system, agent_id)
    kill(first)
    start_worker(env)
    system.wait_until(lambda: delivered(system, agent_id), TAKEN_OVER_S, "the owed webhook")
    requests = receiver.requests
    last = requests[-1]
    body = assert_signed(last, PLAIN)
    assert body["id"] == str(agent_id) and body["status"] == "COMPLETED"
    (delivery,) = deliveries(system, agent_id)
    assert {r.header("webhook-id") for r in requests} == {str(delivery["id"])}
    assert len({r.body for r in requests}) == 1  # every try, the same bytes


def test_a_worker_killed_during_the_retries_loses_nothing(
    system: System, start_worker: Any, receiver: WebhookReceiver,
) -> None:
    env = webhook_env(system)
    receiver.script = [500]
    first = start_worker(env)
    agent_id = create(system, receiver.url)

    def retry_scheduled() -> bool:
        return any(d["last_error"] for d in deliveries(system, agent_id))

    system.wait_until(retry_scheduled, 30, "the first try's failure to be recorded")
    kill(first)  # its retry, due FIRST_RETRY_S later, is now nobody's
    start_worker(env)
    system.wait_until(lambda: delivered(system, agent_id), FIRST_RETRY_S + TAKEN_OVER_S,
                      "the retried webhook")
    failed, retried = receiver.wait_for(2, timeout_s=1)
    assert (failed.answered, retried.answered) == (500, 200)
    assert failed.header("webhook-id") == retried.header("webhook-id")
    assert failed.body == retried.body
    assert assert_signed(retried, PLAIN)["id"] == str(agent_id)
    (delivery,) = deliveries(system, agent_id)
    assert delivery["attempts"] == 2
    assert system.repository.get(agent_id).status is AgentStatus.COMPLETED  # type: ignore[union-attr]
