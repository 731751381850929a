"""A model server on a real socket that speaks Ollama's protocols, scripted by a function.

Like Ollama it answers its native API, `POST /api/chat` (streamed NDJSON or a single
JSON, with tools, thinking and tool calls), `GET /api/tags`, `GET /api/version` and
`POST /api/show` (with each model's capabilities), and the OpenAI one, `POST
/v1/chat/completions` (server-sent events with tool-call deltas and usage, or a single
JSON) and `GET /v1/models`, with the 404 for a model it does not have and stop sequences
honoured (the wire formats: `ollama_api`, `openai_api`). What it says is a
`responder(request_json) -> reply`, a reply being text or a `replies.Turn`, sent after
`latency_s` and a piece every `chunk_delay_s`. Like Ollama, it notices a client that hangs
up mid-reply (even while it is silent, before the first token) and stops replying.

`jarvis-agents demo-model` runs one with the demo's responder (`demo.answers`); the test
suite's FakeOllama (tests/support/fake_ollama.py) is one that records what it is asked and
fails or cuts replies on demand, through the hooks `admit` and `count`.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from jarvis_agents.demo.handler import HttpServer
from jarvis_agents.demo.ollama_api import CAPABILITIES, with_tag
from jarvis_agents.demo.replies import ScriptExhausted, Turn

Responder = Callable[[dict[str, Any]], str | Turn]
Latency = float | Callable[[], float]
# What `admit` says of a chat request: answer it with (HTTP status, message) instead, and
# cut its streamed reply after this many pieces; None and None: answer it whole.
Admission = tuple[tuple[int, str] | None, int | None]


def plain_answer(request: dict[str, Any]) -> str:
    """The responder of a server given none: an answer at once, in the text protocol."""
    return "THOUGHT: Nothing to look up.\nFINAL_ANSWER: 42"


class ModelServer:
    """A scripted model server on a thread; a context manager that starts and stops it."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        responder: Responder | None = None,
        models: Iterable[str] = ("llama3.2",),
        latency_s: Latency = 0.0,
        chunk_delay_s: float = 0.0,
        capabilities: Mapping[str, Sequence[str]] | None = None,
        default_capabilities: Sequence[str] = CAPABILITIES,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        # A server-side context: HTTPS. Then no latency nor chunk delay: a TLS socket
        # cannot be peeked at for a client that hung up.
        self.tls = tls
        self.port = port  # 0 picks a free port at the first start(); restarts reuse it
        self.responder: Responder = responder or plain_answer
        self.models = list(models)
        # What /api/show reports per model; a model not named reports default_capabilities.
        self.capabilities = {with_tag(k): list(v) for k, v in (capabilities or {}).items()}
        self.default_capabilities = list(default_capabilities)
        self.latency_s = latency_s
        self.chunk_delay_s = chunk_delay_s
        self._server: HttpServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> Self:
        """Listen (OSError if the port is taken) and serve on a thread of its own."""
        if self._server is not None:
            raise RuntimeError(f"the model server is already running at {self.url}")
        server = HttpServer((self.host, self.port), self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown() waits up to one poll interval
            name=f"model-server-{self.port}",
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
                    f"the script has {len(script)} replies; the conversation is at turn {turn + 1}"
                )
            return script[turn]

        return respond

    def knows(self, model: str) -> bool:
        return with_tag(model) in {with_tag(m) for m in self.models}

    def capabilities_of(self, model: str) -> list[str]:
        """What /api/show says `model` can do."""
        return self.capabilities.get(with_tag(model), self.default_capabilities)

    def latency(self) -> float:
        """Seconds before a reply's first piece (model load and prompt evaluation)."""
        return self.latency_s() if callable(self.latency_s) else self.latency_s

    # --- hooks (the handler calls them; the tests' FakeOllama records and fails) ----------

    def admit(self, request: dict[str, Any], endpoint: str) -> Admission:
        """A chat request arrived at `endpoint`: how to answer it (see Admission)."""
        return None, None

    def heard(self, authorization: str | None) -> None:
        """A request arrived with this `Authorization` header (None: without one)."""

    def count(self, *, connection: bool = False, hangup: bool = False, chunk: bool = False,
              listing: str | None = None) -> None:
        """A connection was accepted, a client hung up mid-reply, a piece was written, or
        the list of models was asked for at the path `listing`."""
