"""API keys as the doors check them: answers kept a moment, unknown keys too (bounded),
and the keys of open streams rechecked together, one query per interval."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from jarvis_agents.accounts import ApiKeys
from jarvis_agents.store.users import User, hash_api_key

TTL_S = 2.0


class Users:
    """The users' keys, counting what is asked of them."""

    def __init__(self, *keys: str) -> None:
        self.users = {hash_api_key(key): User(uuid.uuid4(), key, datetime.now(UTC)) for key in keys}
        self.lookups: list[str] = []
        self.rechecks: list[list[str]] = []
        self.failing = False

    def by_key_hash(self, key_hash: str) -> User | None:
        self.lookups.append(key_hash)
        return self.users.get(key_hash)

    def live_key_hashes(self, key_hashes: Sequence[str]) -> set[str]:
        if self.failing:
            raise ConnectionError("the database is down")
        self.rechecks.append(list(key_hashes))
        return set(key_hashes) & set(self.users)

    def revoke(self, key: str) -> None:
        del self.users[hash_api_key(key)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_user_and_an_unknown_key_are_each_looked_up_once_per_interval(clock: Clock) -> None:
    users = Users("jrv_ada")
    keys = ApiKeys(users, ttl_s=TTL_S, clock=clock)
    for _ in range(50):
        assert keys.user("jrv_ada") is not None
        assert keys.user("jrv_wrong") is None
    assert len(users.lookups) == 2
    clock.now += TTL_S
    assert keys.user("jrv_wrong") is None and keys.user("jrv_ada") is not None
    assert len(users.lookups) == 4


def test_a_flood_of_random_keys_is_bounded_and_pushes_out_no_user(clock: Clock) -> None:
    users = Users("jrv_ada")
    keys = ApiKeys(users, ttl_s=TTL_S, max_cached=100, clock=clock)
    assert keys.user("jrv_ada") is not None
    for i in range(1000):
        assert keys.user(f"jrv_random_{i}") is None
    users.lookups.clear()
    assert keys.user("jrv_ada") is not None
    assert users.lookups == []  # still kept
    assert keys.user("jrv_random_0") is None
    assert users.lookups == [hash_api_key("jrv_random_0")]  # pushed out by later ones


def test_open_streams_keys_are_rechecked_together_once_per_interval(clock: Clock) -> None:
    users = Users(*(f"jrv_{i}" for i in range(10)))
    keys = ApiKeys(users, ttl_s=TTL_S, clock=clock)
    watches = [keys.watch(f"jrv_{i % 10}") for i in range(1000)]
    for _ in range(3):
        assert all(watch.valid() for watch in watches)
    assert len(users.rechecks) == 1 and sorted(users.rechecks[0]) == sorted(
        hash_api_key(f"jrv_{i}") for i in range(10))

    users.revoke("jrv_3")  # or rotated: the old key's hash is gone either way
    assert all(watch.valid() for watch in watches)  # not rechecked yet
    clock.now += TTL_S
    valid = [watch.valid() for watch in watches]
    assert len(users.rechecks) == 2
    assert [i for i, ok in enumerate(valid) if not ok] == list(range(3, 1000, 10))
    assert keys.user("jrv_3") is None  # its user is not kept past the recheck either

    for watch in watches:
        watch.close()
    assert keys.watching() == 0
    clock.now += TTL_S
    keys.watch("jrv_1").valid()
    assert users.rechecks[-1] == [hash_api_key("jrv_1")]


def test_a_request_that_finds_the_key_gone_ends_its_streams_at_once(clock: Clock) -> None:
    users = Users("jrv_ada", "jrv_bob")
    keys = ApiKeys(users, ttl_s=TTL_S, clock=clock)
    ada, bob = keys.watch("jrv_ada"), keys.watch("jrv_bob")
    assert ada.valid() and bob.valid()
    users.revoke("jrv_ada")
    clock.now += TTL_S / 2  # before the streams' next recheck
    assert keys.user("jrv_ada") is None
    assert not ada.valid() and bob.valid()


def test_streams_go_on_while_the_keys_cannot_be_rechecked(clock: Clock) -> None:
    users = Users("jrv_ada")
    keys = ApiKeys(users, ttl_s=TTL_S, clock=clock)
    watch = keys.watch("jrv_ada")
    users.failing = True
    assert watch.valid()
    users.failing = False
    users.revoke("jrv_ada")
    clock.now += TTL_S
    assert not watch.valid()
