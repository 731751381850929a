"""Who presents an API key: the users' keys as the doors check them (README, HTTP API).

A key is looked up by its SHA-256 (one indexed query) and the answer is kept for
`ttl_s`, a user found and an unknown key alike: a burst of requests, a thousand
streams opening at once or a client retrying a wrong key cost the database one
lookup per key per `ttl_s`. Unknown keys are kept apart, in a bounded map of their
own: a flood of random keys pushes out only other unknown keys, never a user's.
Keeping an unknown key refuses nobody who should get in: keys are random secrets,
so a key a user can present (a new user's, a rotated one) was never presented before
it existed.

`ttl_s` is also how long a key revoked or replaced by `jarvis-agents users revoke` or
`rotate` (another process) may still be taken: the README promises 5 s. A short TTL
rather than a revocation broadcast: it holds in every API process whatever happens to
Redis, and costs one indexed lookup per key per TTL.

A stream outlives its request, so the key it was opened with is watched (`watch`):
every `ttl_s`, one query rechecks the keys of all the process's open streams however
many there are, run by whichever stream asks first once it is due, and a stream
whose key has been revoked or replaced sees it at its next look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Protocol, Self

from jarvis_agents.store.users import User, hash_api_key

log = logging.getLogger(__name__)

KEY_TTL_S = 2.0
MAX_CACHED_KEYS = 10_000  # users found, and apart from them, unknown keys


class KeyStore(Protocol):
    """The users' keys as the store has them (store/users.py)."""

    def by_key_hash(self, key_hash: str) -> User | None: ...

    def live_key_hashes(self, key_hashes: Sequence[str]) -> set[str]: ...


class ApiKeys:
    """API key → user, with the answers kept `ttl_s`, and the keys of open streams watched."""

    def __init__(
        self, users: KeyStore, *, ttl_s: float = KEY_TTL_S, max_cached: int = MAX_CACHED_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.users = users
        self.ttl_s = ttl_s
        self.max_cached = max_cached
        self.clock = clock
        self._known: OrderedDict[str, tuple[float, User]] = OrderedDict()
        self._unknown: OrderedDict[str, float] = OrderedDict()
        self._watched: dict[str, set[KeyWatch]] = {}
        self._next_check = 0.0
        self._checking = False
        self._lock = threading.Lock()

    def user(self, api_key: str) -> User | None:
        """The user the key lets in; None for an unknown, replaced or revoked key."""
        key_hash = hash_api_key(api_key)
        now = self.clock()
        with self._lock:
            known = self._known.get(key_hash)
            if known is not None and known[0] > now:
                return known[1]
            refused_until = self._unknown.get(key_hash)
            if refused_until is not None and refused_until > now:
                return None
        user = self.users.by_key_hash(key_hash)
        with self._lock:
            if user is None:
                self._unknown.pop(key_hash, None)
                _keep(self._unknown, key_hash, now + self.ttl_s, self.max_cached)
                self._known.pop(key_hash, None)
                self._revoke(key_hash)
            else:
                self._unknown.pop(key_hash, None)
                _keep(self._known, key_hash, (now + self.ttl_s, user), self.max_cached)
        return user

    def watch(self, api_key: str) -> KeyWatch:
        """Watch a key that has just let its user in, for as long as the stream it opened
        lasts; close the watch when the stream ends."""
        watch = KeyWatch(self, hash_api_key(api_key))
        with self._lock:
            self._watched.setdefault(watch.key_hash, set()).add(watch)
        return watch

    def watching(self) -> int:
        """How many open streams' keys are watched."""
        with self._lock:
            return sum(len(watches) for watches in self._watched.values())

    def recheck_if_due(self) -> None:
        """Recheck every watched key in one query if the last check is `ttl_s` old; while
        another caller runs it, return at once (its answer comes at the next look)."""
        now = self.clock()
        with self._lock:
            if self._checking or now < self._next_check or not self._watched:
                return
            self._checking = True
            self._next_check = now + self.ttl_s
            key_hashes = list(self._watched)
        try:
            live = self.users.live_key_hashes(key_hashes)
        except Exception as exc:  # noqa: BLE001 - streams go on; the next check tries again
            log.warning("could not recheck the API keys of open streams: %s", exc)
            return
        finally:
            with self._lock:
                self._checking = False
        with self._lock:
            for key_hash in key_hashes:
                if key_hash not in live:
                    self._known.pop(key_hash, None)
                    self._revoke(key_hash)

    def _revoke(self, key_hash: str) -> None:
        """Mark the watches of a key that lets nobody in any more (the lock is held)."""
        for watch in self._watched.get(key_hash, ()):
            watch.revoked = True

    def unwatch(self, watch: KeyWatch) -> None:
        """Stop watching (the stream has ended)."""
        with self._lock:
            watches = self._watched.get(watch.key_hash)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watched[watch.key_hash]


class KeyWatch:
    """The key of one open stream; `valid()` is cheap enough to ask at every tick."""

    def __init__(self, keys: ApiKeys, key_hash: str) -> None:
        self._keys = keys
        self.key_hash = key_hash
        self.revoked = False

    def valid(self) -> bool:
        """Whether the key still lets its user in, as of at most `ttl_s` ago."""
        if not self.revoked:
            self._keys.recheck_if_due()
        return not self.revoked

    def close(self) -> None:
        self._keys.unwatch(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _keep(entries: OrderedDict, key: str, value: object, limit: int) -> None:
    """Put `key` last in `entries`, dropping the oldest past `limit`."""
    entries[key] = value
    entries.move_to_end(key)
    while len(entries) > limit:
        entries.popitem(last=False)
