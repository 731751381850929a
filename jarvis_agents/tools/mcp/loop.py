"""The one asyncio event loop of a process, on a thread of its own, for the MCP sessions.

The MCP SDK is asynchronous and our workers are threads (STYLE.md): one loop thread
owns every session of the process, and an agent's thread submits a call with
`asyncio.run_coroutine_threadsafe`, getting a concurrent Future it can wait on with a
deadline and cancel (which cancels the coroutine, and with it the MCP request).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_TIMEOUT_S = 10.0


class EventLoopThread:
    """An event loop running forever on a daemon thread until `stop`."""

    def __init__(self, name: str = "mcp-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run `coroutine` on the loop; its Future may be waited on from any thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Cancel every task (the sessions close, stdio servers are stopped), then the loop."""
        if not self._thread.is_alive():
            return
        try:
            self.submit(_cancel_all()).result(timeout_s)
        except Exception as exc:  # noqa: BLE001 - stopping is best effort
            log.warning("MCP sessions did not all close within %s s: %s", timeout_s, exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
