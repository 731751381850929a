"""The list of models' queues in Redis (jarvis_agents.routing.QueueDirectory): models no
longer in use are unlisted with their figures, and listed again as soon as they are used."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jarvis_agents.cluster_metrics import ClusterMetrics, read_families
from jarvis_agents.routing import (
    PRUNE_AFTER_S,
    QUEUES_KEY,
    RELIST_S,
    SEEN_KEY,
    QueueDirectory,
    WorkerAdvert,
    queue_for,
)

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    import redis

    with redis.Redis.from_url(redis_url) as found:
        yield found


def listed(client: Any) -> set[str]:
    return {m.decode() for m in client.smembers(QUEUES_KEY)}


def test_a_model_nobody_uses_any_more_is_unlisted_with_its_figures(client):
    clock = Clock()
    directory = QueueDirectory(client, clock=clock, wall=clock)
    for model in ("gone", "pending", "queued", "named", "recent"):
        directory.list_queue(model)
    directory.advertise(WorkerAdvert("w", ("named",), 1, 0), ttl_s=3600)
    client.lpush(queue_for("queued"), "a message no worker took yet")
    clock.now += PRUNE_AFTER_S + 1
    directory.advertise(WorkerAdvert("w", ("named",), 1, 0), ttl_s=3600)  # a live worker's
    QueueDirectory(client, wall=clock).list_queue("recent")  # another process queued for it
    asked: list[int] = []

    def busy() -> set[str]:
        asked.append(1)
        return {"pending"}

    metrics = ClusterMetrics(client)
    for model in ("gone", "pending"):
        metrics.observe("jarvis_planning_seconds", model, seconds=0.2)
        metrics.inc("jarvis_model_tokens", model, "output", amount=7)
    metrics.flush()
    assert directory.prune(busy) == ["gone"]
    assert listed(client) == {"pending", "queued", "named", "recent"}
    assert directory.depths() == {"pending": 0, "queued": 1, "named": 0, "recent": 0}
    assert asked == [1]
    series = {sample.labels.get("model") for family in read_families(client)
              for sample in family.samples}
    assert series == {"pending"}  # /metrics has no series of the model unlisted


def test_a_prune_lists_again_the_models_in_use_that_redis_lost(client):
    clock = Clock()
    directory = QueueDirectory(client, wall=clock)
    directory.list_queue("running")
    client.delete(QUEUES_KEY, SEEN_KEY)  # a Redis restarted empty
    assert directory.prune(lambda: {"running", "pending"}) == []
    assert listed(client) == {"running", "pending"}
    clock.now += PRUNE_AFTER_S + 1
    assert directory.prune(lambda: {"running"}) == ["pending"]  # its agent ended meanwhile


def test_a_model_in_use_is_not_unlisted_before_every_process_would_list_it_again(client):
    clock = Clock()
    enqueuer = QueueDirectory(client, clock=clock, wall=clock)
    pruner = QueueDirectory(client, wall=clock)
    enqueuer.list_queue("m")
    clock.now += RELIST_S + 1  # the enqueuer would list it again now, but has not queued
    assert pruner.prune(set) == []
    clock.now += PRUNE_AFTER_S
    assert pruner.prune(set) == ["m"]
    assert listed(client) == set()
    enqueuer.list_queue("m")  # its next enqueue: its own listing is long out of date
    assert listed(client) == {"m"}
    assert pruner.prune(set) == []  # just listed


def test_a_model_listed_before_stamps_were_kept_is_stamped_then_unlisted_in_time(client):
    clock = Clock()
    client.sadd(QUEUES_KEY, "old")
    directory = QueueDirectory(client, wall=clock)
    assert directory.prune(set) == []
    clock.now += PRUNE_AFTER_S + 1
    assert directory.prune(set) == ["old"]


def test_a_process_keeps_no_listing_it_no_longer_trusts(client):
    clock = Clock()
    directory = QueueDirectory(client, clock=clock, wall=clock)
    for n in range(100):
        directory.list_queue(f"junk-{n}")
    clock.now += RELIST_S
    directory.list_queue("m")
    directory.list_queue("forgotten")
    directory.forget("forgotten")  # a worker forgets a model no longer in use
    assert set(directory._listed) == {"m"}  # what it would list again anyway
