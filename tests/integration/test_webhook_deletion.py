"""A deletion racing a webhook delivery (README, Deleting and retention), on real stores:
the sender records its try's outcome on a row that is gone, which neither fails it nor
brings the row back, and goes on sending the others."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jarvis_agents.deleting import Deleting
from jarvis_agents.lifecycle import utcnow
from jarvis_agents.store.repository import Repository
from tests.support.webhook_outbox import Clock, complete, dispatcher, owed, running
from tests.support.webhook_receiver import HANG, WebhookReceiver


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


def test_a_try_whose_agent_was_deleted_meanwhile_changes_nothing(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    receiver.script = [500]
    agent = running(repository, receiver.url)
    assert complete(repository, agent)
    sending = dispatcher(repository, Clock())
    ((delivery, body),) = sending.claim(5)
    Deleting(repository).purge(agent.user_id, agent.id)  # between the claim and the try
    assert sending.deliver(delivery, body) is False  # its failure recorded on no row
    sending.flush()
    assert owed(repository, agent) == [] and repository.get(agent.id) is None
    assert sending.send_due() == 0


def test_a_sender_whose_try_hangs_while_its_agent_is_deleted_goes_on(
    repository: Repository, receiver: WebhookReceiver,
) -> None:
    receiver.script = [HANG]
    hanging = running(repository, receiver.url)
    assert complete(repository, hanging)
    sending = dispatcher(repository, utcnow)  # the real clock: the second one is due when owed
    sending.start()
    try:
        (first,) = receiver.wait_for(1, timeout_s=30)
        assert first.header("X-Jarvis-Event") == "agent.completed"
        Deleting(repository).purge(hanging.user_id, hanging.id)  # while its try is under way
        receiver.release.set()  # the try is answered 200, then recorded delivered: on no row
        after = running(repository, receiver.url)
        assert complete(repository, after)
        second = receiver.wait_for(2, timeout_s=30)[1]
        assert str(after.id) in second.body.decode()
    finally:
        sending.stop()
    assert owed(repository, hanging) == [] and repository.get(hanging.id) is None
    (row,) = owed(repository, after)
    assert row["delivered_at"] is not None
