"""How many event streams and long-polls each user holds open in this API process.

A stream or a `?wait=` holds a connection for as long as the client likes: without a
cap, one user could hold every connection an API process has. Each SSE stream and
each long-poll takes one of its user's `JARVIS_MAX_STREAMS_PER_USER` slots and gives
it back when it ends, however it ends (finished, the client hung up, an error).

Counted in each process's memory, not across processes: a process that crashes
takes its count with it and leaves no slot held anywhere, where a shared count in
Redis would need leases and a sweeper to get back the slots of a dead process. With
N API processes behind a load balancer, a user may hold up to N × the limit.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from types import TracebackType
from typing import Self

from jarvis_agents.errors import RateLimited

RETRY_AFTER_S = 5


class StreamSlots:
    """Each user's open streams and long-polls in this process, up to `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: Counter[uuid.UUID] = Counter()
        self._lock = threading.Lock()

    def take(self, user_id: uuid.UUID) -> Slot:
        """A slot of this user's, or RateLimited (429 `too_many_streams`) when all are taken."""
        with self._lock:
            if self._held[user_id] >= self.limit:
                raise RateLimited(
                    f"you already have {self.limit} event streams and long-polls open "
                    f"(the limit is {self.limit}); close one before opening another",
                    code="too_many_streams", retry_after_s=RETRY_AFTER_S,
                )
            self._held[user_id] += 1
        return Slot(self, user_id)

    def held(self, user_id: uuid.UUID) -> int:
        with self._lock:
            return self._held[user_id]

    def give_back(self, slot: Slot) -> None:
        """Free `slot`; once only, however many times it is called."""
        with self._lock:
            if slot.released:
                return
            slot.released = True
            self._held[slot.user_id] -= 1
            if self._held[slot.user_id] <= 0:
                del self._held[slot.user_id]


class Slot:
    """One open stream's or long-poll's place; `release()` (or leaving `with`) frees it."""

    def __init__(self, slots: StreamSlots, user_id: uuid.UUID) -> None:
        self.slots = slots
        self.user_id = user_id
        self.released = False

    def release(self) -> None:
        self.slots.give_back(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
