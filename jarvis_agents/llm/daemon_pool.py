"""Reusable daemon threads for blocking reads that their caller may abandon.

Why not `concurrent.futures.ThreadPoolExecutor`: its workers are not daemons and
are joined at interpreter exit, so a model read abandoned on a silent server would
hold a shutting-down worker for up to its read timeout; and with a fixed size,
abandoned reads still draining could make new calls queue behind them. Here a job
runs on an idle thread when there is one and on a new thread otherwise, so the
pool grows to the peak number of reads in flight (about the worker's concurrency)
and never delays a call; a thread idle for `idle_s` ends.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class DaemonPool:
    """Runs jobs on daemon threads, reusing idle ones."""

    def __init__(self, name: str, *, idle_s: float = 60.0) -> None:
        self._name = name
        self._idle_s = idle_s
        self._jobs: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # Invariant, under the lock: threads waiting for a job = idle + queued jobs.
        self._idle = 0
        self._threads = 0
        self._busy = 0

    @property
    def busy(self) -> int:
        """Jobs running now."""
        with self._lock:
            return self._busy

    @property
    def threads(self) -> int:
        """Threads alive, busy or idle."""
        with self._lock:
            return self._threads

    def submit(self, fn: Callable[..., object], /, *args: object) -> None:
        """Run `fn(*args)` on a pool thread, in a copy of the caller's context.

        The copied context keeps the caller's agent id on the job's log lines.
        `fn` should report its own failures; one that raises is logged.
        """
        context = contextvars.copy_context()
        with self._lock:
            self._jobs.put(lambda: context.run(fn, *args))
            if self._idle:
                self._idle -= 1
                return
            self._threads += 1
            number = self._threads
        thread = threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True)
        thread.start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # so this thread is one of the idle ones
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue  # a job arrived as the wait ended: take it
            with self._lock:
                self._busy += 1
            try:
                job()
            except BaseException:  # a job must not kill a shared thread
                logger.exception("a %s job failed", self._name)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._idle += 1
