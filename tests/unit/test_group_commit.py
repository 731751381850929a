"""Group commit: a write alone goes at once; writes that queue up share the next one."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

import pytest

from jarvis_agents.store.group_commit import GroupCommit


class Store:
    """Records each call; the first write alone can be held until the test lets it go."""

    def __init__(self, *, hold_first: bool = False, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s  # a round trip's wait, with the GIL let go
        self.calls: list[tuple[str, list[str]]] = []
        self.release = threading.Event()
        self.holding = threading.Event()
        self._hold = hold_first
        self._lock = threading.Lock()

    def one(self, item: str) -> str:
        with self._lock:
            self.calls.append(("one", [item]))
            hold, self._hold = self._hold, False
        if hold:
            self.holding.set()
            assert self.release.wait(5)
        time.sleep(self.latency_s)
        if item.startswith("bad"):
            raise ValueError(f"refused {item}")
        return item.upper()

    def many(self, items: Sequence[str]) -> list[str | BaseException]:
        with self._lock:
            self.calls.append(("many", list(items)))
        time.sleep(self.latency_s)
        if "broken" in items:
            raise ConnectionError("the connection broke")
        return [ValueError(f"refused {i}") if i.startswith("bad") else i.upper() for i in items]


def _queue_behind_a_held_write(
    group: GroupCommit[str, str], store: Store, items: list[str]
) -> dict[str, object]:
    """Write "first" (held by the store), then `items` from threads that queue behind it."""
    outcomes: dict[str, object] = {}

    def write(item: str) -> None:
        try:
            outcomes[item] = group.write(item)
        except Exception as exc:  # noqa: BLE001 - the test looks at what each write got
            outcomes[item] = exc

    first = threading.Thread(target=write, args=("first",))
    first.start()
    assert store.holding.wait(5)
    threads = [threading.Thread(target=write, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while len(group._line) < len(items) + 1:  # all of them waiting in line
        assert time.monotonic() < deadline, "the writes did not queue up"
        time.sleep(0.001)
    store.release.set()
    for thread in [first, *threads]:
        thread.join(5)
        assert not thread.is_alive(), "a write was left waiting"
    return outcomes


def test_a_write_alone_goes_at_once_as_a_single_write() -> None:
    store = Store()
    group = GroupCommit(store.one, store.many)
    assert group.write("a") == "A"
    assert group.write("b") == "B"
    assert store.calls == [("one", ["a"]), ("one", ["b"])]


def test_writes_made_while_one_is_out_share_the_next_write() -> None:
    store = Store(hold_first=True)
    group = GroupCommit(store.one, store.many)
    items = [f"w{i}" for i in range(5)]
    outcomes = _queue_behind_a_held_write(group, store, items)
    assert outcomes == {"first": "FIRST", **{item: item.upper() for item in items}}
    assert store.calls[0] == ("one", ["first"])
    assert len(store.calls) == 2 and store.calls[1][0] == "many"
    assert sorted(store.calls[1][1]) == items


def test_each_write_of_a_batch_gets_its_own_error() -> None:
    store = Store(hold_first=True)
    group = GroupCommit(store.one, store.many)
    outcomes = _queue_behind_a_held_write(group, store, ["good", "bad-rows", "fine"])
    assert outcomes["good"] == "GOOD" and outcomes["fine"] == "FINE"
    assert isinstance(outcomes["bad-rows"], ValueError)
    assert str(outcomes["bad-rows"]) == "refused bad-rows"


def test_a_batch_that_fails_as_a_whole_fails_every_write_in_it() -> None:
    store = Store(hold_first=True)
    group = GroupCommit(store.one, store.many)
    outcomes = _queue_behind_a_held_write(group, store, ["x", "broken"])
    assert outcomes["first"] == "FIRST"
    assert all(isinstance(outcomes[i], ConnectionError) for i in ("x", "broken"))
    assert group.write("after") == "AFTER"  # and the line goes on


def test_a_long_line_is_written_in_batches_of_at_most_max_batch() -> None:
    store = Store(hold_first=True)
    group = GroupCommit(store.one, store.many, max_batch=2)
    items = [f"w{i}" for i in range(5)]
    outcomes = _queue_behind_a_held_write(group, store, items)
    assert outcomes == {"first": "FIRST", **{item: item.upper() for item in items}}
    sizes = [len(batch) for _, batch in store.calls[1:]]
    assert sizes == [2, 2, 1]


@pytest.mark.timeout(60)
def test_many_threads_writing_all_the_time_each_get_their_own_result() -> None:
    store = Store(latency_s=0.0002)
    group = GroupCommit(store.one, store.many, max_batch=8)
    wrong: list[str] = []

    def agent(n: int) -> None:
        for k in range(100):
            item = f"a{n}-{k}"
            if group.write(item) != item.upper():
                wrong.append(item)
            if random.random() < 0.1:
                time.sleep(0.0001)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a write was left waiting"
    assert wrong == []
    written = [item for _, batch in store.calls for item in batch]
    assert sorted(written) == sorted(f"a{n}-{k}" for n in range(40) for k in range(100))
    assert any(kind == "many" for kind, _ in store.calls)  # they did share writes


def test_a_batch_answered_with_the_wrong_number_of_outcomes_fails_and_the_line_goes_on() -> None:
    store = Store(hold_first=True)
    group = GroupCommit(store.one, lambda items: [item.upper() for item in items][:1])
    outcomes = _queue_behind_a_held_write(group, store, ["x", "y"])
    assert outcomes["first"] == "FIRST"
    assert all(isinstance(outcomes[item], RuntimeError) for item in ("x", "y"))
    assert group.write("after") == "AFTER"
