"""The test suite's model server: `jarvis_agents.demo.server.ModelServer` (a real HTTP
server that speaks Ollama's protocols and the OpenAI one, scripted with a
`responder(request_json) -> reply`, a reply being text or a `Turn`), which also records
what it is asked and fails or cuts replies on demand.

A test can add latency, slow chunks, HTTP failures and dropped connections; it can be
stopped and restarted on the same port to simulate an outage. `hangups` counts the
clients that hung up mid-reply, `chunks` the pieces of streamed replies written, and
`connections` the connections it accepted. Run it as a process for benchmarks:

    python -m tests.support.fake_ollama --port 11555 --latency 2.0 --script calc
"""

from __future__ import annotations

import ssl
import sys
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jarvis_agents.demo.ollama_api import with_tag
from jarvis_agents.demo.replies import ScriptExhausted, Turn, cut_at_stop
from jarvis_agents.demo.server import Admission, Latency, ModelServer, Responder, plain_answer

DEFAULT_MODELS = ("llama3.2", "test-model")
__all__ = ["DEFAULT_MODELS", "FakeOllama", "Latency", "Responder", "ScriptExhausted", "Turn"]

# bench.model_server answers like this server does.
_with_tag, _cut_at_stop = with_tag, cut_at_stop


class FakeOllama(ModelServer):
    """The model server of `jarvis_agents.demo`, with what a test asks of it besides."""

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
        super().__init__(host=host, port=port, responder=responder, models=models,
                         latency_s=latency_s, chunk_delay_s=chunk_delay_s,
                         capabilities=capabilities, tls=tls)
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

    # --- scripting -------------------------------------------------------------------

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
        self.responder = plain_answer
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

    def capabilities_of(self, model: str) -> list[str]:
        with self._lock:
            self._shows.append(model)
        return super().capabilities_of(model)

    def admit(self, request: dict[str, Any], endpoint: str) -> Admission:
        """Record a chat request; the failure and the drop scheduled for it."""
        with self._lock:
            self._requests.append(request)
            self._endpoints.append(endpoint)
            failure = self._failures.popleft() if self._failures else None
            drop = self._drops.popleft() if self._drops and failure is None else None
            return failure, drop

    def heard(self, authorization: str | None) -> None:
        with self._lock:
            self._authorizations.append(authorization)

    def count(self, *, connection: bool = False, hangup: bool = False, chunk: bool = False,
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
