"""Group commit: the writes that queue up while one is out go together in the next one.

Agent threads call `write()`. A thread that finds no write out writes its own at
once, alone, so one agent pays nothing for this. Threads that arrive while a write is
out wait in line; when it returns, the first of them writes for everyone in line
(up to `max_batch`) in one statement and one commit, hands each waiter its own
outcome and, if more have lined up meanwhile, wakes the first of those to do the
same (LevelDB's writer queue). No thread ever writes for longer than one round,
and each waits for its own write to be durable, exactly as it would alone.

Under load the step writes are most of what PostgreSQL and a worker spend per
iteration, and many agents' steps in one statement cost both sides a fraction of what
the same steps cost written one by one; what that gains in agents/s is in
BENCHMARKS.md.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

W = TypeVar("W")
R = TypeVar("R")


class _Waiter(Generic[W, R]):
    __slots__ = ("done", "item", "outcome", "wake")

    def __init__(self, item: W) -> None:
        self.item = item
        self.outcome: R | BaseException | None = None
        self.done = False
        self.wake = threading.Event()  # set when done, or when it is its turn to write


class GroupCommit(Generic[W, R]):
    """Runs `write_one(item)` for a write alone and `write_many(items)` for a batch.

    `write_many` returns one outcome per item, in order: a result, or the exception
    that write alone would have raised (the caller of `write()` gets it raised). If
    `write_many` itself raises, every write of the batch raises that.
    """

    def __init__(
        self,
        write_one: Callable[[W], R],
        write_many: Callable[[Sequence[W]], list[R | BaseException]],
        *,
        max_batch: int = 64,
    ) -> None:
        self._write_one = write_one
        self._write_many = write_many
        self._max_batch = max_batch
        self._line: deque[_Waiter[W, R]] = deque()  # the front is the write that is out
        self._lock = threading.Lock()

    def write(self, item: W) -> R:
        me: _Waiter[W, R] = _Waiter(item)
        with self._lock:
            self._line.append(me)
            leader = len(self._line) == 1
        if not leader:
            me.wake.wait()
            if me.done:
                return self._result(me)
        # This thread's turn: it writes for everyone in line now, itself first.
        with self._lock:
            batch = [self._line[i] for i in range(min(len(self._line), self._max_batch))]
        try:
            if len(batch) == 1:
                outcomes: list[R | BaseException] = [self._call_one(me.item)]
            else:
                outcomes = self._write_many([waiter.item for waiter in batch])
                if len(outcomes) != len(batch):
                    raise RuntimeError(f"{len(outcomes)} outcomes for {len(batch)} writes")
        except BaseException as exc:  # noqa: BLE001 - no waiter may be left waiting
            outcomes = [exc] * len(batch)
        with self._lock:
            for _ in batch:
                self._line.popleft()
            following = self._line[0] if self._line else None
        for waiter, outcome in zip(batch, outcomes, strict=True):
            waiter.outcome, waiter.done = outcome, True
            if waiter is not me:
                waiter.wake.set()
        if following is not None:
            following.wake.set()  # its turn: it writes for those that lined up meanwhile
        return self._result(me)

    def _call_one(self, item: W) -> R | BaseException:
        try:
            return self._write_one(item)
        except Exception as exc:  # noqa: BLE001 - raised on the thread whose write it was
            return exc

    @staticmethod
    def _result(waiter: _Waiter[W, R]) -> R:
        outcome = waiter.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]
