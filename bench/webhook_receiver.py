"""The benchmark's webhook receiver: answers every POST 200 at once and clocks its arrival.

    python -m bench.webhook_receiver --port 18080

Like bench/model_server.py, one asyncio loop in one process with a minimal HTTP/1.1
parser (request head, a Content-Length body, keep-alive): a stand-in for a receiver
that costs little of the cores it shares with the system under test. Each POST is
recorded as (X-Jarvis-Agent-Id, webhook-id, wall-clock arrival); `GET /bench/log`
returns the records, `?clear=1` also forgets them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import time
from collections.abc import Sequence

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
_MAX_HEAD = 64 * 1024

Delivery = tuple[str, str, float]  # (agent id, webhook-id, arrived)


class Receiver(asyncio.Protocol):
    """One client connection: requests answered in order."""

    def __init__(self, log: list[Delivery]) -> None:
        self.log = log
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] - a TCP server's: a Transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None and (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            fields = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
            length = int(fields.get("content-length") or 0)
            if len(self.buffer) < end + 4 + length:
                return  # the body is still coming
            del self.buffer[: end + 4 + length]
            method, _, rest = head[0].partition(" ")
            target = rest.partition(" ")[0]
            if method == "GET" and target.startswith("/bench/log"):
                body = json.dumps({"deliveries": self.log}).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                if target.endswith("clear=1"):
                    self.log.clear()
                continue
            self.log.append((fields.get("x-jarvis-agent-id", ""), fields.get("webhook-id", ""),
                             time.time()))
            self.transport.write(_OK)
        if len(self.buffer) > _MAX_HEAD and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def fetch_deliveries(url: str, *, clear: bool = False) -> list[Delivery]:
    """The records of a running bench webhook receiver."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/bench/log{'?clear=1' if clear else ''}", timeout=30) as r:
        return [tuple(d) for d in json.load(r)["deliveries"]]  # type: ignore[misc]


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log: list[Delivery] = []
    server = await loop.create_server(lambda: Receiver(log), host, port, backlog=1024,
                                      reuse_address=True)
    async with server:
        print(f"bench webhook receiver listening on http://{host}:{port}", flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_receiver")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
