"""The webhook outbox on real PostgreSQL and SQLite: what a status change owes, the claim,
the schedule, and each try against a real HTTP receiver (pinned, checked, capped)."""

from __future__ import annotations

import ipaddress
import json
import ssl
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trustme

from jarvis_agents import approvals
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.lifecycle import AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store.repository import Repository
from jarvis_agents.webhooks.addresses import IPAddress, check_webhook_url
from jarvis_agents.webhooks.dispatcher import LEASE_S, RETRY_DELAYS_S, WebhookDispatcher
from jarvis_agents.webhooks.sender import WebhookSender
from tests.support.dispatchers import NoQueue
from tests.support.webhook_outbox import (
    Clock,
    agent_with,
    complete,
    dispatcher,
    owed,
    running,
    settings,
)
from tests.support.webhook_receiver import ENDLESS, WebhookReceiver

pytestmark = pytest.mark.integration

TRIES = 1 + len(RETRY_DELAYS_S)


# --- what a status change owes --------------------------------------------------------------


def test_each_terminal_change_owes_one_delivery_of_its_event(repository: Repository) -> None:
    completed = running(repository)
    assert complete(repository, completed)
    failed = running(repository)  # as the runner fails an agent whose workers were lost
    assert repository.transition(
        failed.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=failed.attempt,
        error="the agent's worker was lost 3 times", stop_reason=StopReason.WORKER_LOST)
    service = AgentService(repository=repository, settings=settings(), dispatcher=NoQueue(),  # type: ignore[arg-type]
                           events=MemoryEventBus(), tool_names=["calculate"])
    cancelled = agent_with(repository)
    service.cancel(cancelled.user_id, cancelled.id)
    for agent, event in ((completed, "agent.completed"), (failed, "agent.failed"),
                         (cancelled, "agent.cancelled")):
        (delivery,) = owed(repository, agent)
        assert (delivery["event"], delivery["url"], delivery["attempts"]) == (
            event, "http://127.0.0.1:9/hook", 0)
        assert delivery["delivered_at"] is None and delivery["abandoned_at"] is None


def test_nothing_is_owed_without_a_url_a_won_change_or_an_end(repository: Repository) -> None:
    silent = running(repository, url=None)
    assert complete(repository, silent)
    assert owed(repository, silent) == []
    agent = running(repository)
    assert owed(repository, agent) == []  # PENDING → RUNNING owes nothing
    assert complete(repository, agent)
    assert not complete(repository, agent)  # a second completion loses its compare-and-set
    assert not repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
    assert [d["event"] for d in owed(repository, agent)] == ["agent.completed"]


def test_the_body_is_the_agent_json_as_it_ended(repository: Repository) -> None:
    agent = running(repository)
    assert complete(repository, agent)
    ended = repository.get(agent.id)
    assert ended is not None
    (delivery,) = owed(repository, agent)
    # Made with the change by the API's builder of the agent JSON (Agent.to_json).
    assert json.loads(delivery["payload"]) == ended.to_json()
    assert delivery["payload"] == json.dumps(ended.to_json(), separators=(",", ":"))
    assert delivery["user_id"] == agent.user_id


def test_an_agent_waiting_body_says_waiting_though_approved_before_it_is_sent(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    agent = running(repository, receiver.url)
    rows = [Step(1, 0, StepType.THINK, "multiply"),
            Step(2, 0, StepType.ACT, "6*7", tool="calculate", call_id="call_1")]
    assert approvals.wait(repository, agent, rows, rows[1]) is not None
    as_it_waited = repository.get(agent.id)
    assert as_it_waited is not None
    approvals.answer(repository, as_it_waited, call_id="call_1", approve=True)
    assert repository.get(agent.id).status is AgentStatus.PENDING  # type: ignore[union-attr]
    assert dispatcher(repository, Clock()).send_due() == 1  # the first try, after the answer
    (request,) = receiver.wait_for(1, timeout_s=5)
    assert request.header("X-Jarvis-Event") == "agent.waiting"
    body = json.loads(request.body)
    assert body["status"] == "WAITING" and body["step_count"] == 1
    assert body["waiting_for"]["call_id"] == "call_1" and body["waiting_for"]["tool"] == "calculate"
    # All of it as it waited; its running time as it was then, not as it is now.
    assert body == {**as_it_waited.to_json(), "duration_ms": body["duration_ms"]}


# --- the claim --------------------------------------------------------------------------


def test_a_claim_takes_each_due_delivery_once_until_its_lease_ends(repository: Repository) -> None:
    agents = [running(repository) for _ in range(2)]
    for agent in agents:
        assert complete(repository, agent)
    now = utcnow() + timedelta(seconds=1)
    first = repository.outbox.claim_due(now=now, lease_s=LEASE_S, limit=1, tries=TRIES)
    second = repository.outbox.claim_due(now=now, lease_s=LEASE_S, limit=5, tries=TRIES)
    assert len(first) == len(second) == 1 and first[0].id != second[0].id
    assert {first[0].agent_id, second[0].agent_id} == {a.id for a in agents}
    assert first[0].attempt == second[0].attempt == 1
    assert repository.outbox.claim_due(now=now, lease_s=LEASE_S, limit=5, tries=TRIES) == []  # leased
    later = now + timedelta(seconds=LEASE_S + 1)  # their worker died: due again
    again = repository.outbox.claim_due(now=later, lease_s=LEASE_S, limit=5, tries=TRIES)
    assert sorted(d.id for d in again) == sorted([first[0].id, second[0].id])
    assert {d.attempt for d in again} == {2}
    # The try that outlived its lease records nothing; the latest claim's try does.
    stale = first[0]
    assert not repository.outbox.failed(stale, payload="{}", error="late", began=now,
                                        took_ms=1, now=later, retry_at=later)
    (latest,) = [d for d in again if d.id == stale.id]
    assert repository.outbox.failed(latest, payload="{}", error="x", began=later, took_ms=1,
                                    now=later, retry_at=later)


def test_a_released_claim_is_due_at_once_and_its_try_not_counted(repository: Repository) -> None:
    agent = running(repository)
    assert complete(repository, agent)
    now = utcnow() + timedelta(seconds=1)
    (claimed,) = repository.outbox.claim_due(now=now, lease_s=LEASE_S, limit=5, tries=TRIES)
    later = now + timedelta(seconds=LEASE_S / 2 + 1)
    assert repository.outbox.release(claimed, now=later)
    assert not repository.outbox.release(claimed, now=later)  # no longer that claim's
    (again,) = repository.outbox.claim_due(now=later, lease_s=LEASE_S, limit=5, tries=TRIES)
    assert again.id == claimed.id and again.attempt == 1


def test_concurrent_claims_never_take_a_delivery_twice(repository: Repository) -> None:
    agents = [running(repository) for _ in range(40)]
    for agent in agents:
        assert complete(repository, agent)
    now = utcnow() + timedelta(seconds=1)
    taken: list[uuid.UUID] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def claimer() -> None:
        start.wait()
        while due := repository.outbox.claim_due(now=now, lease_s=LEASE_S, limit=3, tries=TRIES):
            with lock:
                taken.extend(d.agent_id for d in due)

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(taken) == sorted(a.id for a in agents)  # each once, none left out


# --- tries against a receiver ---------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.mark.parametrize(("env", "delays"), [
    ({}, RETRY_DELAYS_S),
    ({"JARVIS_WEBHOOK_RETRY_DELAYS": "1,2.5"}, (1, 2.5)),  # as the fault tests shorten it
], ids=["default", "shortened"])
def test_a_failing_delivery_follows_its_schedule_then_is_dead(
    repository: Repository, receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture,
    env: dict[str, str], delays: tuple[float, ...],
) -> None:
    receiver.script = [500] * 10
    agent = running(repository, receiver.url)
    assert complete(repository, agent)
    clock = Clock()
    sending = dispatcher(repository, clock, **env)
    outcomes: list[str] = []  # what jarvis_webhook_deliveries_total counts
    sending.outcomes = outcomes.append
    for number, delay in enumerate((*delays, None), 1):
        assert sending.send_due() == 1
        assert sending.send_due() == 0  # not due again before its time
        (row,) = owed(repository, agent)
        assert row["attempts"] == number and row["last_error"] == "HTTP 500: receiver says no"
        if delay is None:
            assert row["abandoned_at"] is not None and row["delivered_at"] is None
        else:
            assert _aware(row["next_at"]) == clock.now + timedelta(seconds=delay)
            clock.now += timedelta(seconds=delay)
    clock.now += timedelta(days=1)
    assert sending.send_due() == 0  # dead: never tried again
    tries = receiver.wait_for(1 + len(delays), timeout_s=5)
    assert len({t.header("webhook-id") for t in tries}) == 1
    assert len({t.body for t in tries}) == 1  # the same bytes every time
    assert f"dead after {1 + len(delays)} tries" in caplog.text
    assert outcomes == ["failed"] * len(delays) + ["dead"]
    assert repository.get(agent.id).status is AgentStatus.COMPLETED  # type: ignore[union-attr]


def test_a_claim_is_held_for_the_lease_of_the_settings(repository: Repository) -> None:
    agent = running(repository)
    assert complete(repository, agent)
    clock = Clock()
    short = dispatcher(repository, clock, JARVIS_WEBHOOK_LEASE="3")
    assert len(short.claim(5)) == 1
    clock.now += timedelta(seconds=2)
    assert short.claim(5) == []  # still its claimer's
    clock.now += timedelta(seconds=2)
    ((again, _),) = short.claim(5)  # its claimer died: due again once the 3 s lease ended
    assert again.agent_id == agent.id and again.attempt == 2


def test_a_delivered_webhook_is_not_sent_again(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    agent = running(repository, receiver.url)
    assert complete(repository, agent)
    clock = Clock()
    sending = dispatcher(repository, clock)
    outcomes: list[str] = []
    sending.outcomes = outcomes.append
    assert sending.send_due() == 1
    assert outcomes == ["delivered"]
    clock.now += timedelta(days=1)
    assert sending.send_due() == 0
    (row,) = owed(repository, agent)
    assert row["delivered_at"] is not None and row["attempts"] == 1
    (only,) = receiver.wait_for(1, timeout_s=5)
    assert only.header("X-Jarvis-Event") == "agent.completed"


def test_an_endless_answer_is_read_only_so_far(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    receiver.script = [ENDLESS]
    agent = running(repository, receiver.url)
    assert complete(repository, agent)
    sending = dispatcher(repository, Clock())
    assert sending.send_due() == 1
    (row,) = owed(repository, agent)
    assert row["delivered_at"] is not None, row["last_error"]


def test_tries_to_one_receiver_share_a_kept_connection(receiver: WebhookReceiver) -> None:
    sender = WebhookSender(allow_private=True)
    try:
        for number in range(3):
            outcome = sender.post(receiver.url, b'{"n":%d}' % number, {"webhook-id": "w"})
            assert outcome.delivered, outcome.error
    finally:
        sender.close()
    assert len(receiver.wait_for(3, timeout_s=5)) == 3
    assert receiver.connections == 1


# --- the address: checked at each try and pinned ----------------------------------------------


class Resolver:
    """A fake DNS the test changes between the create and the delivery."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        return [ipaddress.ip_address(self.address)]


def test_a_name_rebound_to_loopback_after_create_is_refused_at_delivery(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    dns = Resolver("93.184.215.14")
    strict = settings()
    url = f"http://hooks.jarvis.test:{receiver.port}/hook"
    service = AgentService(
        repository=repository, settings=strict, dispatcher=NoQueue(), events=MemoryEventBus(),  # type: ignore[arg-type]
        tool_names=["calculate"], webhook_check=lambda u: check_webhook_url(u, strict, resolver=dns))
    user, _ = repository.users.create(f"u-{uuid.uuid4().hex[:8]}")
    agent, _ = service.create(user.id, CreateRequest(goal="goal", webhook_url=url))
    claimed = repository.claim(agent.id)
    assert claimed is not None and complete(repository, claimed)
    dns.address = "127.0.0.1"  # the name now points at the receiver, on loopback
    sending = WebhookDispatcher.from_settings(repository, strict, resolver=dns)
    assert sending is not None
    assert sending.send_due() == 1
    (row,) = owed(repository, agent)
    assert "non-public address (127.0.0.1)" in row["last_error"]
    assert row["delivered_at"] is None and row["attempts"] == 1
    assert dns.asked == ["hooks.jarvis.test", "hooks.jarvis.test"]  # at create, at the try
    assert receiver.connections == 0 and receiver.requests == []  # never reached


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def try_over_tls(
    repository: Repository, ca: trustme.CA, certified: str,
) -> tuple[dict[str, Any], WebhookReceiver, list[str]]:
    """One try at https://hooks.jarvis.test (resolved to 127.0.0.1) of a receiver whose
    certificate names `certified`: the delivery's row, the receiver, the TLS server names
    the receiver was asked for."""
    names: list[str] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(certified).configure_cert(context)
    context.sni_callback = lambda sock, server_name, ctx: names.append(server_name)  # type: ignore[assignment,func-returns-value]
    client = ssl.create_default_context()
    ca.configure_trust(client)
    with WebhookReceiver(tls=context) as receiver:
        agent = running(repository, f"https://hooks.jarvis.test:{receiver.port}/hook")
        assert complete(repository, agent)
        sending = WebhookDispatcher.from_settings(
            repository, settings(JARVIS_WEBHOOK_ALLOW_PRIVATE="1"), resolver=Resolver("127.0.0.1"),
            verify=client)
        assert sending is not None and sending.send_due() == 1
        (row,) = owed(repository, agent)
    return row, receiver, names


def test_a_try_connects_to_the_resolved_address_with_the_name_kept_for_host_and_tls(
    repository: Repository, ca: trustme.CA,
) -> None:
    row, receiver, names = try_over_tls(repository, ca, "hooks.jarvis.test")
    assert row["delivered_at"] is not None, row["last_error"]
    (request,) = receiver.requests
    assert request.header("Host") == f"hooks.jarvis.test:{receiver.port}"
    assert names == ["hooks.jarvis.test"]  # the TLS server name


def test_a_certificate_for_another_name_is_refused(repository: Repository, ca: trustme.CA) -> None:
    row, receiver, _ = try_over_tls(repository, ca, "elsewhere.jarvis.test")
    assert row["delivered_at"] is None
    assert "certificate" in row["last_error"].lower(), row["last_error"]
    assert receiver.requests == []


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)  # SQLite's are naive
