"""The benchmark's model: FakeOllama with the bench script and a clock on every call.

    python -m bench.model_server --port 11555 --latency 0 --tool-calls 3

It is `tests.support.fake_ollama.FakeOllama` — a real HTTP server speaking Ollama's
`/api/chat` — answering `--tool-calls` ReACT turns that call `calculate`, then a
FINAL_ANSWER ("4 planning calls + 3 tool calls" for --tool-calls 3). For every chat
request it records when the request arrived (its first line read off the socket) and
when the last byte of the reply was written, keyed by the `[bench TAG]` in the agent's goal and the turn number, so the
harness can measure from outside the time an agent spends between two model calls.
`GET /bench/log` returns those records; `?clear=1` also forgets them.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support import fake_ollama
from tests.support.fake_ollama import FakeOllama

TAG = re.compile(r"\[bench ([^\]]+)\]")


def react_script(tool_calls: int):  # type: ignore[no-untyped-def]
    """`tool_calls` turns asking for `calculate`, then the final answer; stateless."""

    def respond(request: dict[str, Any]) -> str:
        turn = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
        if turn < tool_calls:
            return (
                f"THOUGHT: I need step {turn + 1}.\nACTION: calculate\nINPUT: {1234 + turn} * 902"
            )
        return f"THOUGHT: I have what I need.\nFINAL_ANSWER: {1234 * 902}"

    return respond


class CallLog:
    """(tag, turn, arrived, finished) of every chat request, wall-clock seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[tuple[str, int, float, float]] = []

    def add(self, tag: str, turn: int, arrived: float, finished: float) -> None:
        with self._lock:
            self._records.append((tag, turn, arrived, finished))

    def take(self, *, clear: bool) -> list[tuple[str, int, float, float]]:
        with self._lock:
            records = list(self._records)
            if clear:
                self._records.clear()
        return records


CALLS = CallLog()


class BenchHandler(fake_ollama._Handler):
    """FakeOllama's handler plus the call clock and the /bench/log endpoint."""

    def parse_request(self) -> bool:
        # A request's arrival is when its first line came off the socket, before
        # http.server parses the headers (email.parser, ~0.15-0.2 ms here) and the body:
        # that parsing is the fake server's own cost, not the agent's.
        self._arrived = time.time()
        return super().parse_request()

    def do_POST(self) -> None:
        self._bench_call: tuple[str, int] | None = None
        super().do_POST()
        if self._bench_call is not None:
            tag, turn = self._bench_call
            CALLS.add(tag, turn, self._arrived, time.time())

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path != "/bench/log":
            super().do_GET()
            return
        clear = parse_qs(parts.query).get("clear") == ["1"]
        self._send_json(200, {"calls": CALLS.take(clear=clear)})

    def _chat(self, request: dict[str, Any]) -> None:
        messages = request.get("messages", [])
        goal = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
        match = TAG.search(goal)
        if match:
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            self._bench_call = (match.group(1), turn)
        super()._chat(request)


def fetch_calls(url: str, *, clear: bool = False) -> list[tuple[str, int, float, float]]:
    """The call records of a running bench model server."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/bench/log{'?clear=1' if clear else ''}", timeout=30) as r:
        return [tuple(c) for c in json.load(r)["calls"]]  # type: ignore[misc]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11555)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before the reply")
    parser.add_argument("--tool-calls", type=int, default=3)
    args = parser.parse_args(argv)
    # FakeOllama's server builds its handler from this module attribute.
    fake_ollama._Handler = BenchHandler  # type: ignore[misc]
    fake = FakeOllama(
        host=args.host,
        port=args.port,
        responder=react_script(args.tool_calls),
        latency_s=args.latency,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with fake:
        print(
            f"bench model listening on {fake.url} "
            f"(latency {args.latency:g} s, {args.tool_calls} tool calls)",
            flush=True,
        )
        while not stop.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
