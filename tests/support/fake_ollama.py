"""A real HTTP server that speaks Ollama's protocols, for integration tests and benchmarks.

Like Ollama it answers its native API, `POST /api/chat` (streamed NDJSON or a single
JSON, with tools, thinking and tool calls), `GET /api/tags`, `GET /api/version` and
`POST /api/show` (with each model's capabilities), and the OpenAI one, `POST
/v1/chat/completions` (server-sent events with tool-call deltas and usage, or a
single JSON) and `GET /v1/models`, with the 404 for a model it does not have and
stop sequences honoured (the wire formats: `fake_ollama_api.py`,
`fake_openai_api.py`). A test scripts it with a `responder(request_json) -> reply`,
a reply being text or a `fake_replies.Turn`, and can add latency, slow chunks, HTTP
failures and dropped connections; it can be stopped and restarted on the same port to
simulate an outage. Like Ollama, it notices a client that hangs up mid-reply (even
while it is silent, before the first token) and stops replying: `hangups` counts
them, `chunks` the pieces of streamed replies written, and `connections` the
connections it accepted. Run it as a process for benchmarks:

    python -m tests.support.fake_ollama --port 11555 --latency 2.0 --script calc
"""

from __future__ import annotations

import ssl
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from tests.support.fake_ollama_api import CAPABILITIES, with_tag
from tests.support.fake_ollama_http import ModelServer
from tests.support.fake_replies import ScriptExhausted, Turn, cut_at_stop

Responder = Callable[[dict[str, Any]], str | Turn]
Latency = float | Callable[[], float]

DEFAULT_MODELS = ("llama3.2", "test-model")
__all__ = ["DEFAULT_MODELS", "FakeOllama", "Latency", "Responder", "ScriptExhausted", "Turn"]

# bench.model_server answers like this server does.
_with_tag, _cut_at_stop = with_tag, cut_at_stop


def _default_responder(request: dict[str, Any]) -> str:
    return "THOUGHT: Nothing to look up.\nFINAL_ANSWER: 42"


class FakeOllama:
    """An Ollama look-alike on a real socket; a context manager that starts and stops it."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        responder: Responder | None = None,
        models: Iterable[str] = DEFAULT_MODELS,
        latency_s: Latency = 0.0,
        chunk_delay_s: float = 0.0,
        capabilities: Mapping[str, Sequence[str]] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        # A server-side context: HTTPS. Then no latency nor chunk delay: a TLS socket
        # cannot be peeked at for a client that hung up.
        self.tls = tls
        self.port = port  # 0 picks a free port at the first start(); restarts reuse it
        self.responder: Responder = responder or _default_responder
        self.models = list(models)
        # What /api/show reports per model; a model not named reports CAPABILITIES.
        self.capabilities = {with_tag(k): list(v) for k, v in (capabilities or {}).items()}
        self.latency_s = latency_s
        self.chunk_delay_s = chunk_delay_s
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._endpoints: list[str] = []
        self._shows: list[str] = []
        self._listings: list[str] = []
        self._authorizations: list[str | None] = []
        self._failures: deque[tuple[int, str]] = deque()
        self._drops: deque[int] = deque()
        self._hangups = 0
        self._chunks = 0
        self._connections = 0
        self._changed = threading.Condition(self._lock)
        self._server: ModelServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> FakeOllama:
        if self._server is not None:
            raise RuntimeError(f"FakeOllama is already running at {self.url}")
        server = ModelServer((self.host, self.port), self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown() waits up to one poll interval
            name=f"fake-ollama-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection, as a crashed server would."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.stop()  # wakes handlers waiting out a latency or chunk delay
        server.shutdown()
        server.server_close()
        server.cut_connections()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- scripting -------------------------------------------------------------------

    @staticmethod
    def by_turn(replies: Sequence[str | Turn]) -> Responder:
        """Reply index = number of assistant messages in the request's conversation.

        The conversation says which turn it is, so one script serves 100 concurrent
        agents and agents resumed from their persisted steps alike.
        """
        script = list(replies)

        def respond(request: dict[str, Any]) -> str | Turn:
            turn = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
            if turn >= len(script):
                raise ScriptExhausted(
                    f"FakeOllama script has {len(script)} replies; the conversation is at turn {turn + 1}"
                )
            return script[turn]

        return respond

    def fail_next(self, n: int = 1, *, status: int = 500, message: str = "internal server error") -> None:
        """Answer the next `n` chat requests with HTTP `status` and `{"error": message}`."""
        with self._lock:
            self._failures.extend([(status, message)] * n)

    def drop_next(self, n: int = 1, *, after_chunks: int = 1) -> None:
        """Cut the connection of the next `n` streamed replies after `after_chunks` chunks."""
        with self._lock:
            self._drops.extend([after_chunks] * n)

    def reset(self) -> None:
        """Forget every script, delay, scheduled failure and count: as just started.

        A server that a module's tests share (`tests.support.api_fixtures.stack`) is
        reset before each test, so none sees another's requests or script."""
        self.responder = _default_responder
        self.latency_s = 0.0
        self.chunk_delay_s = 0.0
        with self._changed:
            for recorded in (self._requests, self._endpoints, self._shows, self._listings,
                             self._authorizations, self._failures, self._drops):
                recorded.clear()
            self._hangups = self._chunks = self._connections = 0

    # --- what was received -----------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def endpoints(self) -> list[str]:
        """The path of each chat request, in the order of `requests`."""
        with self._lock:
            return list(self._endpoints)

    @property
    def call_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def shows(self) -> list[str]:
        """The model named by each `/api/show` request so far."""
        with self._lock:
            return list(self._shows)

    @property
    def listings(self) -> list[str]:
        """The path of each request for the list of models (`/api/tags`, `/v1/models`)."""
        with self._lock:
            return list(self._listings)

    @property
    def authorizations(self) -> list[str | None]:
        """The `Authorization` header of every request so far (None: it had none)."""
        with self._lock:
            return list(self._authorizations)

    @property
    def connections(self) -> int:
        """How many connections it has accepted (each a TCP handshake)."""
        with self._lock:
            return self._connections

    @property
    def hangups(self) -> int:
        """How many chat replies ended because the client hung up before their end."""
        with self._lock:
            return self._hangups

    def wait_for_hangups(self, n: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Whether `n` clients have hung up mid-reply, waiting up to `timeout_s` for it."""
        with self._changed:
            return self._changed.wait_for(lambda: self._hangups >= n, timeout=timeout_s)

    @property
    def chunks(self) -> int:
        """How many pieces of streamed replies it has written (a reply under way has some)."""
        with self._lock:
            return self._chunks

    def wait_for_chunks(self, n: int = 1, *, timeout_s: float = 5.0) -> bool:
        """Whether `n` pieces of replies have been written, waiting up to `timeout_s`."""
        with self._changed:
            return self._changed.wait_for(lambda: self._chunks >= n, timeout=timeout_s)

    def knows(self, model: str) -> bool:
        return with_tag(model) in {with_tag(m) for m in self.models}

    def capabilities_of(self, model: str) -> list[str]:
        with self._lock:
            self._shows.append(model)
        return self.capabilities.get(with_tag(model), list(CAPABILITIES))

    def _admit(
        self, request: dict[str, Any], endpoint: str
    ) -> tuple[tuple[int, str] | None, int | None]:
        """Record a chat request; return the failure and the drop scheduled for it."""
        with self._lock:
            self._requests.append(request)
            self._endpoints.append(endpoint)
            failure = self._failures.popleft() if self._failures else None
            drop = self._drops.popleft() if self._drops and failure is None else None
            return failure, drop

    def _heard(self, authorization: str | None) -> None:
        with self._lock:
            self._authorizations.append(authorization)

    def _latency(self) -> float:
        return self.latency_s() if callable(self.latency_s) else self.latency_s

    def _count(self, *, connection: bool = False, hangup: bool = False, chunk: bool = False,
               listing: str | None = None) -> None:
        with self._changed:
            if listing is not None:
                self._listings.append(listing)
            self._connections += connection
            self._hangups += hangup
            self._chunks += chunk
            self._changed.notify_all()


if __name__ == "__main__":
    # The command line, with its built-in scripts, lives beside this module.
    from tests.support.fake_ollama_scripts import main

    sys.exit(main())
