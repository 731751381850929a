"""The daemon pool the model adapter reads replies on."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable

import pytest

from jarvis_agents.llm.daemon_pool import DaemonPool

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


def eventually(check: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.005)


def test_sequential_jobs_reuse_one_daemon_thread() -> None:
    pool = DaemonPool("test-pool")
    seen: list[threading.Thread] = []
    for _ in range(5):
        done = threading.Event()
        pool.submit(lambda done=done: (seen.append(threading.current_thread()), done.set()))
        assert done.wait(2)
        eventually(lambda: pool.busy == 0)
    assert len(set(seen)) == 1 and seen[0].daemon
    assert seen[0].name == "test-pool-1" and pool.threads == 1


def test_a_blocked_job_never_delays_the_next_one() -> None:
    pool = DaemonPool("test-pool")
    release, ran = threading.Event(), threading.Event()
    try:
        pool.submit(release.wait, 10)
        pool.submit(ran.set)
        assert ran.wait(1)
        assert pool.threads == 2
    finally:
        release.set()


def test_jobs_run_in_the_callers_context() -> None:
    pool = DaemonPool("test-pool")
    where.set("caller")
    got: list[str] = []
    done = threading.Event()
    pool.submit(lambda: (got.append(where.get()), done.set()))
    assert done.wait(2) and got == ["caller"]


def test_a_failing_job_is_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    pool = DaemonPool("test-pool")

    def fail() -> None:
        raise RuntimeError("boom")

    pool.submit(fail)
    done = threading.Event()
    eventually(lambda: pool.busy == 0 and "boom" in caplog.text)
    pool.submit(done.set)
    assert done.wait(2) and pool.threads == 1
    assert "a test-pool job failed" in caplog.text


def test_idle_threads_end() -> None:
    pool = DaemonPool("test-pool", idle_s=0.05)
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(2)
    eventually(lambda: pool.threads == 0)
    again = threading.Event()
    pool.submit(again.set)  # a new thread takes over
    assert again.wait(2)
