"""Many SSE subscribers per process, on raw asyncio sockets.

Each subscriber sends `GET /api/v1/agents/{id}/events`, then reads the chunked
event stream; for every step event it takes the receive time (wall clock, as the
event loop hands it the bytes read) and the publish time the bench wrote into the
event's `content`. With `tokens` it asks for `?tokens=1` and times the token events
instead (their `delta` starts with `@<publish time> `); a think event ends it. Each is an `asyncio.Protocol`, not a task on a StreamReader:
with 250 streams per process, every event arriving on all of them at once, a
task's wake-up per read doubled the clients' CPU per event, and the clients share
the cores with the server — their queue showed up as server latency.
"""

from __future__ import annotations

import asyncio
import json
import queue
import time
from typing import Any
from urllib.parse import urlsplit

from bench.clients import SPAWN

DELTA_STAMP = b'"delta": "@'  # a token event's delta, as the bench writes it: "@<published> …"


class _Stream(asyncio.Protocol):
    """One subscriber: the request once connected, then the think events it receives."""

    def __init__(self, request: bytes, expected: int, shared: _Shared, tokens: bool = False) -> None:
        self.request = request
        self.tokens = tokens
        self.expected = expected
        self.shared = shared
        self.head: bytes | None = b""  # until the response head is complete
        self.pending = b""
        self.received = 0
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if self.head is not None:
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            head, _, data = self.head.partition(b"\r\n\r\n")
            self.head = None
            if not head.startswith(b"HTTP/1.1 200"):
                self.finish(RuntimeError(f"{head.splitlines()[0]!r}"))
                return
            self.shared.opened_one()
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                at = line.find(DELTA_STAMP) if self.tokens else -1
                if at >= 0:  # read without parsing: 16,000 of them a second share the cores
                    start = at + len(DELTA_STAMP)
                    self.shared.latencies.append(now - float(line[start:line.index(b" ", start)]))
                    self.shared.tokens += 1
                    continue
                event = json.loads(line[6:])
                if event.get("type") == "think":
                    if not self.tokens:
                        self.shared.latencies.append(now - float(event["content"]))
                    self.received += 1
        if self.received >= self.expected:
            self.finish()

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish()

    def finish(self, error: Exception | None = None) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(self.received)
            else:
                self.done.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class _Shared:
    """What a process's streams share: the latencies, and the count of opened streams."""

    def __init__(self, streams: int) -> None:
        self.latencies: list[float] = []
        self.tokens = 0
        self.opened = asyncio.Event()
        self.count = 0
        self.streams = streams

    def opened_one(self) -> None:
        self.count += 1
        if self.count == self.streams:
            self.opened.set()


async def _run(
    base_url: str, api_key: str, agent_ids: list[str], expected: int, control: Any, report: Any,
    tokens: bool = False,
) -> None:
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    shared = _Shared(len(agent_ids))
    streams: list[_Stream] = []
    for agent_id in agent_ids:
        request = (
            f"GET /api/v1/agents/{agent_id}/events{'?tokens=1' if tokens else ''} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\n"
            f"Authorization: Bearer {api_key}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
        # One connection after another: a burst of 250 SYNs at once is not the test.
        _, stream = await loop.create_connection(
            lambda request=request: _Stream(request, expected, shared, tokens), host, port
        )
        streams.append(stream)
    await asyncio.wait_for(shared.opened.wait(), timeout=120)
    report.put(("open", len(agent_ids)))
    # Done when every stream has its events, or when the harness says "stop" (it always
    # does, in collect(): that also releases the thread waiting on the control queue).
    told = loop.run_in_executor(None, control.get)
    finished = asyncio.gather(*(s.done for s in streams), return_exceptions=True)
    await asyncio.wait([finished, told], return_when=asyncio.FIRST_COMPLETED)
    for stream in streams:
        stream.finish()
    await finished
    errors = sorted(
        {repr(s.done.exception())[:200] for s in streams if s.done.exception() is not None}
    )
    counts = [s.received for s in streams]
    report.put(
        (
            "done",
            {
                "latencies": shared.latencies,
                "tokens": shared.tokens,
                "streams": len(agent_ids),
                "complete_streams": sum(1 for c in counts if c >= expected),
                "received": sorted(counts)[:5],
                "errors": errors,
            },
        )
    )
    await told


def _client_main(
    base_url: str, api_key: str, agent_ids: list[str], expected: int, control: Any, report: Any,
    tokens: bool = False,
) -> None:
    asyncio.run(_run(base_url, api_key, agent_ids, expected, control, report, tokens))


class Subscribers:
    """N processes holding SSE streams; open(), then the harness publishes, then collect()."""

    def __init__(
        self, base_url: str, api_key: str, agent_ids: list[str], *, processes: int, expected: int,
        tokens: bool = False,
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
                    tokens,
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
        streams = complete = tokens = 0
        for kind, value in reports:
            latencies.extend(value["latencies"])
            tokens += value.get("tokens", 0)
            streams += value["streams"]
            complete += value["complete_streams"]
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        return {"latencies": latencies, "streams": streams, "complete_streams": complete,
                "tokens": tokens}
