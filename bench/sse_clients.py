"""Many SSE subscribers per process, on raw asyncio sockets.

Each subscriber sends `GET /api/v1/agents/{id}/events`, then reads the chunked
event stream; for every step event it takes the receive time (wall clock, right
after the socket read returned) and the publish time the bench wrote into the
event's `content`. A raw socket reader costs a few microseconds per event, so a
process holds hundreds of streams without becoming the thing measured.
"""

from __future__ import annotations

import asyncio
import json
import queue
import time
from typing import Any
from urllib.parse import urlsplit

from bench.clients import SPAWN


async def _subscribe(
    host: str,
    port: int,
    path: str,
    api_key: str,
    expected: int,
    latencies: list[float],
    opened: asyncio.Event,
    counter: list[int],
    stop: asyncio.Event,
) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET {path}: {head.splitlines()[0]!r}")
    counter[0] += 1
    if counter[0] == counter[1]:
        opened.set()
    received = 0
    pending = b""
    try:
        while received < expected and not stop.is_set():
            data = await reader.read(65536)
            now = time.time()
            if not data:
                break
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if event.get("type") == "think":
                        latencies.append(now - float(event["content"]))
                        received += 1
    finally:
        writer.close()
    return received


async def _run(
    base_url: str, api_key: str, agent_ids: list[str], expected: int, control: Any, report: Any
) -> None:
    parts = urlsplit(base_url)
    latencies: list[float] = []
    opened = asyncio.Event()
    stop = asyncio.Event()
    counter = [0, len(agent_ids)]
    tasks = []
    for agent_id in agent_ids:
        tasks.append(
            asyncio.create_task(
                _subscribe(
                    parts.hostname or "127.0.0.1",
                    parts.port or 80,
                    f"/api/v1/agents/{agent_id}/events",
                    api_key,
                    expected,
                    latencies,
                    opened,
                    counter,
                    stop,
                )
            )
        )
        await asyncio.sleep(0)  # let it connect: a burst of 250 SYNs at once is not the test
    await asyncio.wait_for(opened.wait(), timeout=120)
    report.put(("open", len(agent_ids)))
    loop = asyncio.get_running_loop()
    # Done when every stream has its events, or when the harness says "stop" (it always
    # does, in collect(): that also releases the thread waiting on the control queue).
    told = loop.run_in_executor(None, control.get)
    await asyncio.wait(
        [asyncio.gather(*tasks, return_exceptions=True), told], return_when=asyncio.FIRST_COMPLETED
    )
    stop.set()
    done, _ = await asyncio.wait(tasks, timeout=10)
    counts = [t.result() for t in done if not t.cancelled() and t.exception() is None]
    errors = sorted(
        {repr(t.exception())[:200] for t in done if not t.cancelled() and t.exception() is not None}
    )
    for task in tasks:
        task.cancel()
    report.put(
        (
            "done",
            {
                "latencies": latencies,
                "streams": len(agent_ids),
                "complete_streams": sum(1 for c in counts if c >= expected),
                "received": sorted(counts)[:5],
                "errors": errors,
            },
        )
    )
    await told


def _client_main(
    base_url: str, api_key: str, agent_ids: list[str], expected: int, control: Any, report: Any
) -> None:
    asyncio.run(_run(base_url, api_key, agent_ids, expected, control, report))


class Subscribers:
    """N processes holding SSE streams; open(), then the harness publishes, then collect()."""

    def __init__(
        self, base_url: str, api_key: str, agent_ids: list[str], *, processes: int, expected: int
    ) -> None:
        self.report = SPAWN.Queue()
        self.controls = [SPAWN.Queue() for _ in range(processes)]
        shares = [agent_ids[i::processes] for i in range(processes)]
        self.processes = [
            SPAWN.Process(
                target=_client_main,
                args=(
                    base_url,
                    api_key,
                    share,
                    expected,
                    self.controls[i],
                    self.report,
                ),
                daemon=True,
            )
            for i, share in enumerate(shares)
        ]

    def open(self, *, timeout_s: float = 180) -> int:
        for process in self.processes:
            process.start()
        opened = 0
        for _ in self.processes:
            kind, value = self.report.get(timeout=timeout_s)
            if kind != "open":
                raise RuntimeError(f"an SSE client failed: {kind} {value}")
            opened += value
        return opened

    def collect(self, *, grace_s: float = 10, timeout_s: float = 60) -> dict[str, Any]:
        """Wait up to `grace_s` for every stream to have its events, then stop them all."""
        reports = []
        deadline = time.monotonic() + grace_s
        while len(reports) < len(self.processes) and time.monotonic() < deadline:
            try:
                reports.append(self.report.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                break
        for control in self.controls:
            control.put("stop")
        while len(reports) < len(self.processes):
            reports.append(self.report.get(timeout=timeout_s))
        latencies: list[float] = []
        streams = complete = 0
        for kind, value in reports:
            latencies.extend(value["latencies"])
            streams += value["streams"]
            complete += value["complete_streams"]
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        return {"latencies": latencies, "streams": streams, "complete_streams": complete}
