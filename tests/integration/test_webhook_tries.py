"""Webhook tries against real receivers, as the worker's conditions make them hard: a
worker process holding more descriptors than select() can watch."""

from __future__ import annotations

import os
import resource
import uuid
from collections.abc import Iterator

import pytest

from jarvis_agents.lifecycle import utcnow
from jarvis_agents.store.repository import Repository
from tests.support.webhook_outbox import complete, dispatcher, owed, running
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


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
