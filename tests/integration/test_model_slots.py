"""The per-model semaphore (jarvis_agents.model_slots) on a real Redis: several
`ModelSlots` stand for several worker processes (each has an owner of its own)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.errors import Cancelled
from jarvis_agents.llm.base import StopSignal
from jarvis_agents.model_slots import ModelSlots
from tests.conftest import ROOT, private_redis
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis server of the test's own: `script_calls` counts the whole server's."""
    with private_redis(tmp_path) as url:
        yield url


@pytest.fixture
def processes(redis_url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(redis_url)
    made: list[ModelSlots] = []

    def make(cap: int = 1, **options: Any) -> ModelSlots:
        slots = ModelSlots(client, {"m": cap}, **options)
        slots.start()
        made.append(slots)
        return slots

    yield make
    for slots in made:
        slots.stop()
    client.close()


def hold(slots: ModelSlots, release: threading.Event, log: list[str], name: str,
         should_stop: Any = lambda: False) -> threading.Thread:
    def run() -> None:
        try:
            with slots.slot("m", should_stop=should_stop):
                log.append(f"start {name}")
                release.wait(10)
                log.append(f"end {name}")
        except Cancelled:
            log.append(f"cancelled {name}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def waiting(redis_url: str) -> int:
    """Calls waiting for a slot of the model "m" (their tickets in Redis)."""
    import redis

    with redis.Redis.from_url(redis_url) as client:
        return int(client.zcard("jarvis:slots:m:queue"))


def test_calls_over_the_cap_start_in_the_order_they_asked_across_processes(processes, redis_url):
    a, b, c = processes(), processes(), processes()
    log: list[str] = []
    releases = [threading.Event() for _ in range(4)]
    threads = [hold(a, releases[0], log, "first")]
    wait_until(lambda: log == ["start first"], timeout_s=5)
    for index, (slots, name) in enumerate([(b, "second"), (c, "third"), (a, "fourth")], 1):
        threads.append(hold(slots, releases[index], log, name))
        # each asks once the one before has its ticket: their tickets are in this order
        wait_until(lambda n=index: waiting(redis_url) == n, timeout_s=5)
    for release in releases:
        release.set()
    for thread in threads:
        thread.join(10)
    starts = [line for line in log if line.startswith("start")]
    assert starts == ["start first", "start second", "start third", "start fourth"]
    # never two at once with a cap of 1: each start follows the end of the one before
    assert log == [f"{kind} {n}" for n in ("first", "second", "third", "fourth")
                   for kind in ("start", "end")]


DIE_HOLDING = """
import os, signal, sys, redis
from jarvis_agents.model_slots import ModelSlots
slots = ModelSlots(redis.Redis.from_url(sys.argv[1]), {"m": 1}, owner_ttl_s=1.0)
slots.start()
with slots.slot("m", should_stop=lambda: False):
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_holder_that_dies_frees_its_slot_when_its_lease_expires(processes, redis_url):
    dying = subprocess.run([sys.executable, "-c", DIE_HOLDING, redis_url], cwd=ROOT, check=False,
                           capture_output=True, text=True, timeout=30)
    assert dying.stdout == "holding\n" and dying.returncode == -signal.SIGKILL
    log: list[str] = []
    done = threading.Event()
    done.set()
    # The dead holder never gives the slot back: only its lease (1 s) running out frees it.
    hold(processes(), done, log, "next").join(30)
    assert log == ["start next", "end next"]


def test_a_cancellation_wakes_a_waiting_call_and_gives_its_turn_back(processes, redis_url):
    slots = processes()
    log: list[str] = []
    release = threading.Event()
    hold(slots, release, log, "holder")
    wait_until(lambda: log == ["start holder"], timeout_s=5)
    cancelled = threading.Event()
    signal = StopSignal(cancelled.is_set)  # wakes the waiter itself: no polling
    waiter = hold(slots, threading.Event(), log, "waiter", should_stop=signal)
    then = hold(slots, release, log, "then")
    wait_until(lambda: waiting(redis_url) == 2, timeout_s=5)
    cancelled.set()
    signal.wake()
    waiter.join(2)
    assert log == ["start holder", "cancelled waiter"]
    release.set()
    then.join(5)
    assert log[2:] == ["end holder", "start then", "end then"]  # the cancelled ticket is skipped


def test_an_uncapped_model_never_waits(processes):
    slots = processes()
    with slots.slot("other", should_stop=lambda: False) as waited:
        assert waited == 0.0


def test_a_waiting_call_is_queued_again_when_redis_restarts_empty(processes, redis_url):
    import redis

    slots = processes(owner_ttl_s=3.0)
    log: list[str] = []
    release = threading.Event()
    holder = hold(slots, release, log, "holder")
    waiter = hold(slots, release, log, "waiter")
    wait_until(lambda: waiting(redis_url) == 1, timeout_s=5)
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()  # a restart without persistence: tickets, slots and leases gone
    # The waiter is not stranded: its ticket is taken again, and the slot is free.
    wait_until(lambda: "start waiter" in log, timeout_s=5)
    release.set()
    holder.join(5)
    waiter.join(5)
    assert not holder.is_alive() and not waiter.is_alive()  # both calls ended


def test_a_slot_granted_to_a_call_already_gone_is_given_back(processes, redis_url):
    import redis

    slots = processes()
    with redis.Redis.from_url(redis_url) as client:
        # A ticket of this process whose call has left (a recheck crossing its leave).
        client.zadd("jarvis:slots:m:queue", {f"{slots.owner}/gone": 0})
    log: list[str] = []
    done = threading.Event()
    done.set()
    hold(slots, done, log, "next").join(5)
    assert log == ["start next", "end next"]


# --- the process's pool of idle slots --------------------------------------------------


def holders(redis_url: str) -> int:
    """Slots of the model "m" Redis counts as held (idle in a pool or in use)."""
    import redis

    with redis.Redis.from_url(redis_url) as client:
        return int(client.scard("jarvis:slots:m:holders"))


def script_calls(redis_url: str) -> int:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        stats = client.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def test_calls_under_a_cap_that_does_not_bind_reuse_the_process_s_slots(processes, redis_url):
    # The process's own looks an hour apart: any script call here is one a call made.
    slots = processes(cap=100, poll_s=3600.0)
    with slots.slot("m", should_stop=lambda: False):
        pass
    before = script_calls(redis_url)
    for _ in range(200):
        with slots.slot("m", should_stop=lambda: False):
            pass
    # No round trip per call: the slot stays this process's, and counted in Redis. (The
    # first call's end wakes the process for a look or two of its own.)
    assert script_calls(redis_url) - before <= 2
    assert holders(redis_url) == 1


def test_an_idle_slot_goes_back_as_soon_as_another_process_waits(processes, redis_url):
    # Unused slots kept for an hour: only a's looks at the queue can give b the slot.
    a, b = processes(idle_s=3600.0), processes(idle_s=3600.0)
    with a.slot("m", should_stop=lambda: False):
        pass
    assert holders(redis_url) == 1  # kept by a: the cap of 1 is taken
    with b.slot("m", should_stop=lambda: False):
        assert holders(redis_url) == 1  # b's, never both
    # While b's slot is kept, a's next call waits its turn and gets b's slot back.
    log: list[str] = []
    done = threading.Event()
    done.set()
    hold(a, done, log, "again").join(5)
    assert log == ["start again", "end again"]


def test_calls_that_wait_keep_their_order_across_processes_that_keep_slots(processes, redis_url):
    a, b = processes(idle_s=60.0), processes(idle_s=60.0)
    with a.slot("m", should_stop=lambda: False):
        pass  # a keeps the slot
    log: list[str] = []
    release = threading.Event()
    first = hold(b, release, log, "b-first")
    wait_until(lambda: log == ["start b-first"], timeout_s=5)
    second = hold(a, release, log, "a-second")
    wait_until(lambda: waiting(redis_url) == 1, timeout_s=5)
    third = hold(b, release, log, "b-third")
    wait_until(lambda: waiting(redis_url) == 2, timeout_s=5)
    release.set()
    for thread in (first, second, third):
        thread.join(10)
    assert [line for line in log if line.startswith("start")] == [
        "start b-first", "start a-second", "start b-third"]
    assert log == [f"{kind} {n}" for n in ("b-first", "a-second", "b-third")
                   for kind in ("start", "end")]


def test_idle_slots_go_back_after_a_while_unused(processes, redis_url):
    slots = processes(cap=5, idle_s=0.3)
    release = threading.Event()
    log: list[str] = []
    threads = [hold(slots, release, log, str(i)) for i in range(3)]
    wait_until(lambda: len(log) == 3, timeout_s=5)
    release.set()
    for thread in threads:
        thread.join(5)
    assert holders(redis_url) == 3  # kept for the next calls
    wait_until(lambda: holders(redis_url) == 0, timeout_s=5)  # then free for anyone


def test_a_stopped_process_gives_its_idle_slots_back(processes, redis_url):
    slots = processes(cap=2, idle_s=60.0)
    with slots.slot("m", should_stop=lambda: False):
        pass
    assert holders(redis_url) == 1
    slots.stop()
    assert holders(redis_url) == 0
