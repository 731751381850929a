"""The benchmark's model: a small Ollama look-alike with the bench script and a call clock.

    python -m bench.model_server --port 11555 --latency 0 --tool-calls 3

Why not `tests.support.fake_ollama.FakeOllama` (which the test suite keeps using): it
is http.server, a thread per connection with email.parser headers, and it cost
~1.6 ms of CPU per agent (4 chat calls) on the same cores as the system under test,
lowering the agents/s the harness measures. This is one asyncio event loop in one
process: a minimal HTTP/1.1 parser (request line, headers up to CRLFCRLF, a
Content-Length body), keep-alive, pre-encoded replies, TCP_NODELAY and a 1024-deep
listen backlog; a call's latency is a timer (`call_later`), not a waiting thread, so
scenario 2's hundreds of concurrent calls cost nothing while they wait.

It speaks what the worker and real Ollama use: `POST /api/chat` streamed (NDJSON in
chunked encoding, one token-like piece per line, then the `done` line) or not
(`"stream": false`: one JSON), honouring `options.stop` and answering 404 for a model
it does not have; `GET /api/tags` (the worker's readiness probe), `/api/version`, `/`
and `POST /api/show`. The script is FakeOllama's bench script: `--tool-calls` turns
asking for `calculate`, then a FINAL_ANSWER, the turn being the number of assistant
messages after the agent's goal, the last user message with a `[bench TAG]` (stateless,
so any number of agents share it; a follow-up's earlier turns come before its goal).

For every chat request whose goal carries a `[bench TAG]` it records when the request
arrived (when the loop's wait that found its first bytes in the socket ended, before
any parsing) and when the last byte of the reply was written, keyed by the tag and the turn, so the harness can
measure from outside the time an agent spends between two model calls.
`GET /bench/log` returns those records; `?clear=1` also forgets them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import selectors
import signal
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from tests.support.fake_ollama import DEFAULT_MODELS, _cut_at_stop, _with_tag

TAG = re.compile(r"\[bench ([^\]]+)\]")
# The model of the native-mode row: the one this server says can call tools.
NATIVE_MODEL = "bench-native"
MODELS = tuple(_with_tag(m) for m in (*DEFAULT_MODELS, NATIVE_MODEL))
_MAX_HEAD = 64 * 1024
_PIECES = re.compile(r"\s*\S+|\s+")  # a word with its leading whitespace, as Ollama streams
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 431: "Request Header Fields Too Large"}

Call = tuple[str, int, float, float]  # (tag, turn, arrived, finished), wall-clock seconds


def script_reply(turn: int, tool_calls: int) -> str:
    """`tool_calls` turns asking for `calculate`, then the final answer."""
    if turn < tool_calls:
        return f"THOUGHT: I need step {turn + 1}.\nACTION: calculate\nINPUT: {1234 + turn} * 902"
    return f"THOUGHT: I have what I need.\nFINAL_ANSWER: {1234 * 902}"


def native_call(turn: int, tool_calls: int) -> list[dict[str, Any]]:
    """The same script in native tool calling: a `calculate` call per turn, then none."""
    if turn >= tool_calls:
        return []
    return [{"id": f"call_{turn}", "function": {
        "name": "calculate", "arguments": {"expression": f"{1234 + turn} * 902"}}}]


def _response(status: int, body: bytes,
              content_type: str = "application/json; charset=utf-8") -> bytes:
    head = f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {content_type}\r\n"
    return head.encode("latin-1") + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _json(status: int, payload: Any) -> bytes:
    return _response(status, json.dumps(payload).encode())


def _chunk(data: bytes) -> bytes:
    return b"%X\r\n%s\r\n" % (len(data), data)


class Model:
    """The script, its pre-encoded replies, and the call log."""

    def __init__(self, *, latency_s: float, tool_calls: int) -> None:
        self.latency_s = latency_s
        self.tool_calls = tool_calls
        self.calls: list[Call] = []
        self._replies: dict[tuple[str, int, tuple[str, ...], bool, bool], bytes] = {}
        created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        entries = [
            {"name": m, "model": m, "modified_at": created, "size": 2_019_393_189,
             "digest": hashlib.sha256(m.encode()).hexdigest(),
             "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"}}
            for m in MODELS
        ]
        self.static = {
            ("GET", "/api/tags"): _json(200, {"models": entries}),
            ("GET", "/api/version"): _json(200, {"version": "0.6.0-bench"}),
            ("GET", "/"): _response(200, b"Ollama is running", "text/plain; charset=utf-8"),
        }

    def reply(self, model: str, turn: int, stop: tuple[str, ...], stream: bool,
              native: bool = False) -> bytes:
        """The whole HTTP response to a chat call, built once per distinct call; `native`
        when the call offered tools (the reply then makes its calls as tool calls)."""
        key = (model, turn, stop, stream, native)
        if (found := self._replies.get(key)) is not None:
            return found
        calls = native_call(turn, self.tool_calls) if native else []
        if native:
            text = "" if calls else str(1234 * 902)
        else:
            text = _cut_at_stop(script_reply(turn, self.tool_calls), stop)
        base = {"model": model, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        done = {
            **base, "message": {"role": "assistant", "content": "",
                                **({"tool_calls": calls} if calls else {})}, "done": True,
            "done_reason": "stop", "total_duration": int(self.latency_s * 1e9), "load_duration": 0,
            "prompt_eval_count": 2 * turn + 2, "eval_count": len(text.split()),
        }
        if not stream:
            data = _json(200, {**done, "message": {**done["message"], "content": text}})
        else:
            lines = [{**base, "message": {"role": "assistant", "content": p}, "done": False}
                     for p in _PIECES.findall(text)] + [done]
            data = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                    + b"".join(_chunk(json.dumps(line).encode() + b"\n") for line in lines)
                    + b"0\r\n\r\n")
        self._replies[key] = data
        return data


class Connection(asyncio.Protocol):
    """One client connection: requests answered in order, one at a time."""

    def __init__(self, model: Model, selector: ClockedSelector) -> None:
        self.model = model
        self.selector = selector
        self.buffer = bytearray()
        self.arrived = 0.0  # when the first bytes of the request at the buffer's start came
        self.waiting = False  # a reply is being held for the latency
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if not self.buffer:
            self.arrived = self.selector.woke
        self.buffer += data
        if not self.waiting:
            self._serve()

    def _serve(self) -> None:
        """Answer the complete requests in the buffer, up to one held for its latency."""
        buffer = self.buffer
        while not self.waiting and self.transport is not None and not self.transport.is_closing():
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    self._send(_json(431, {"error": "request head too large"}), close=True)
                return
            lines = buffer[:end].decode("latin-1").split("\r\n")
            method, _, rest = lines[0].partition(" ")
            target, _, version = rest.partition(" ")
            length, close = 0, version == "HTTP/1.0"
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection":
                    tokens = value.lower()
                    close = "close" in tokens or (close and "keep-alive" not in tokens)
            if len(buffer) < end + 4 + length:
                return  # the body is still coming
            body = bytes(buffer[end + 4 : end + 4 + length])
            del buffer[: end + 4 + length]
            arrived = self.arrived
            if buffer:
                self.arrived = time.time()  # a pipelined request: it is here by now
            self._dispatch(method, target, body, arrived, close)

    def _dispatch(self, method: str, target: str, body: bytes, arrived: float, close: bool) -> None:
        path, _, query = target.partition("?")
        if method == "POST" and path == "/api/chat":
            self._chat(body, arrived, close)
        elif (static := self.model.static.get((method, path))) is not None:
            self._send(static, close=close)
        elif method == "GET" and path == "/bench/log":
            calls = self.model.calls
            self._send(_json(200, {"calls": calls}), close=close)
            if "clear=1" in query.split("&"):
                self.model.calls = []
        elif method == "POST" and path == "/api/show":
            request = _loads(body) or {}
            name = _with_tag(str(request.get("model") or request.get("name") or ""))
            if name in MODELS:
                payload = {"modelfile": f"FROM {name}", "parameters": "",
                           "template": "{{ .Prompt }}", "details": {"format": "gguf"},
                           "model_info": {},
                           # Only NATIVE_MODEL calls tools: `auto` agents of the others
                           # speak the text contract, as the bench's text rows measure.
                           "capabilities": ["completion", "tools"]
                           if name == _with_tag(NATIVE_MODEL) else ["completion"]}
                self._send(_json(200, payload), close=close)
            else:
                self._send(_json(404, {"error": f'model "{name}" not found'}), close=close)
        else:
            self._send(_json(404, {"error": "404 page not found"}), close=close)

    def _chat(self, body: bytes, arrived: float, close: bool) -> None:
        request = _loads(body)
        if request is None:
            self._send(_json(400, {"error": "invalid JSON"}), close=close)
            return
        model = str(request.get("model", ""))
        if _with_tag(model) not in MODELS:
            error = {"error": f'model "{model}" not found, try pulling it first'}
            self._send(_json(404, error), close=close)
            return
        messages = request.get("messages") or []
        # The agent's goal is the last user message with a tag: a follow-up's earlier turns
        # (goals and answers of its thread) come before it; its turn counts the replies after.
        at = next((i for i in range(len(messages) - 1, -1, -1)
                   if messages[i].get("role") == "user"
                   and TAG.search(str(messages[i].get("content", "")))), 0)
        turn = sum(1 for m in messages[at:] if m.get("role") == "assistant")
        match = TAG.search(str(messages[at].get("content", ""))) if messages else None
        stop = tuple((request.get("options") or {}).get("stop") or ())
        reply = self.model.reply(model, turn, stop, request.get("stream", True) is not False,
                                 native=bool(request.get("tools")))
        call = (match.group(1), turn, arrived) if match else None
        if self.model.latency_s > 0:
            self.waiting = True  # later requests on this connection wait for this reply
            loop = asyncio.get_running_loop()
            loop.call_later(self.model.latency_s, self._reply_late, reply, call, close)
        else:
            self._reply(reply, call, close)

    def _reply_late(self, reply: bytes, call: tuple[str, int, float] | None, close: bool) -> None:
        self.waiting = False
        if self.transport is not None and not self.transport.is_closing():
            self._reply(reply, call, close)
            self._serve()

    def _reply(self, reply: bytes, call: tuple[str, int, float] | None, close: bool) -> None:
        """The whole reply in one write (a streamed one too: the script has no pauses)."""
        self._send(reply, close=close)
        if call is not None:
            # The write went to the socket at once (asyncio sends before buffering).
            self.model.calls.append((*call, time.time()))

    def _send(self, data: bytes, *, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if close:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class ClockedSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The loop's selector, noting when each wait ended: the arrival of what it reported.

    A request's bytes were in the socket when the wait returned; the callbacks run
    before its own (other connections' replies) are the server's time, not the agent's.
    """

    woke = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(timeout)
        self.woke = time.time()
        return ready


def _loads(body: bytes) -> Any:
    try:
        found = json.loads(body or b"{}")
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def fetch_calls(url: str, *, clear: bool = False) -> list[Call]:
    """The call records of a running bench model server."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/bench/log{'?clear=1' if clear else ''}", timeout=30) as r:
        return [tuple(c) for c in json.load(r)["calls"]]  # type: ignore[misc]


async def serve(host: str, port: int, model: Model, selector: ClockedSelector) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await loop.create_server(
        lambda: Connection(model, selector), host, port, backlog=1024, reuse_address=True)
    async with server:
        print(
            f"bench model listening on http://{host}:{port} "
            f"(latency {model.latency_s:g} s, {model.tool_calls} tool calls)",
            flush=True,
        )
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11555)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before the reply")
    parser.add_argument("--tool-calls", type=int, default=3)
    args = parser.parse_args(argv)
    model = Model(latency_s=args.latency, tool_calls=args.tool_calls)
    selector = ClockedSelector()
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selector)) as runner:
        runner.run(serve(args.host, args.port, model, selector))
    return 0


if __name__ == "__main__":
    sys.exit(main())
