"""Claimed tries waiting for a sender, taken in turns by user, a few of each at most.

A worker's senders are shared by every user's deliveries. One user's slow or dead
receivers hold a sender for up to a try's deadline each, so a user may have at most
`per_user` tries under way in a worker: the other senders stay free for everyone
else's. Among the users with a try waiting and room for it, the one served longest ago
goes next. Not thread-safe: the dispatcher holds its lock around every call.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class Turns(Generic[K, T]):
    """Items waiting per key (a user), and how many of each key's are under way."""

    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self._waiting: OrderedDict[K, deque[T]] = OrderedDict()  # served longest ago first
        self._under_way: Counter[K] = Counter()
        self._count = 0

    def __len__(self) -> int:
        """How many wait."""
        return self._count

    def put(self, key: K, item: T) -> None:
        self._waiting.setdefault(key, deque()).append(item)
        self._count += 1

    def take(self) -> tuple[K, T] | None:
        """The next item to start, now counted under way until `done(key)`; None when
        every waiting key has `per_user` under way already (or nothing waits)."""
        for key, items in self._waiting.items():
            if self._under_way[key] < self.per_user:
                item = items.popleft()
                del self._waiting[key]
                if items:
                    self._waiting[key] = items  # to the back of the line
                self._count -= 1
                self._under_way[key] += 1
                return key, item
        return None

    def done(self, key: K) -> None:
        """One of `key`'s items is no longer under way."""
        self._under_way[key] -= 1
        if self._under_way[key] <= 0:
            del self._under_way[key]

    def startable(self) -> bool:
        """Whether `take` would hand out an item now."""
        return any(self._under_way[key] < self.per_user for key in self._waiting)

    def full(self) -> list[K]:
        """The keys with `per_user` items waiting already: claiming more of theirs now
        would only make them wait longer."""
        return [key for key, items in self._waiting.items() if len(items) >= self.per_user]

    def drain(self) -> list[T]:
        """Every waiting item, removed."""
        items = [item for queued in self._waiting.values() for item in queued]
        self._waiting.clear()
        self._count = 0
        return items
