"""The `openai` client's requests sent through our own exchange, so that they can be cut.

The `openai` client speaks HTTP through an `httpx2.Client`, whose transport is the
documented place to plug another one in. This one sends each request with
`jarvis_agents.llm.streaming.StreamingClient`, as the Ollama adapter does: a
cancellation or the step deadline then cuts a call at any point (the connect, the
TLS handshake, the wait for the response head while a model loads, a silent
stream) within ~100 ms, which httpx2's own transport cannot do before the response
head has arrived, and the CPU a streamed reply costs is that of `llm.wire`
(`python -m bench.model_client` has the figures).

A request must be made inside `cutting(interrupts)`, on the same thread: that is how
the call's cancellation and deadline reach the transport. Errors come out as the
exchange raises them (TransientModelError, Cancelled, StepTimeout): the `openai`
client passes them through unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from types import TracebackType
from urllib.parse import urlsplit

import httpx2

from jarvis_agents.llm import wire
from jarvis_agents.llm.interrupts import Interrupts
from jarvis_agents.llm.streaming import StreamingClient

# What a reply read to its [DONE] line leaves unread, normally the chunked body's
# last empty chunk, is waited for this long, so that the connection can be kept.
DRAIN_S = 0.05

# Sent by the exchange itself, or not to be forwarded.
_OWN_HEADERS = frozenset({"host", "content-length", "accept-encoding", "connection",
                          "transfer-encoding", "keep-alive"})

_CALL: ContextVar[Interrupts | None] = ContextVar("model_call_interrupts", default=None)


@contextmanager
def cutting(interrupts: Interrupts) -> Iterator[None]:
    """Requests made by this thread in the block are cut by `interrupts`."""
    token = _CALL.set(interrupts)
    try:
        yield
    finally:
        _CALL.reset(token)


class ExchangeTransport(httpx2.BaseTransport):
    """An httpx2 transport that POSTs through a StreamingClient (see the module)."""

    def __init__(self, base_url: str, *, connect_timeout_s: float, read_timeout_s: float) -> None:
        url = urlsplit(base_url)
        self.origin = f"{url.scheme}://{url.netloc}"
        self._http = StreamingClient(self.origin, headers={}, connect_timeout_s=connect_timeout_s,
                                     read_timeout_s=read_timeout_s)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        interrupts = _CALL.get()
        if interrupts is None:
            raise RuntimeError("a model call's request must be made inside llm.openai_transport.cutting()")
        origin = f"{request.url.scheme}://{request.url.netloc.decode('ascii')}"
        if request.method != "POST" or origin != self.origin:
            raise RuntimeError(f"this transport POSTs to {self.origin} only, not {request.method} {origin}")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _OWN_HEADERS}
        path = request.url.raw_path.decode("ascii").lstrip("/")
        exchange = self._http.post(path, request.read(), interrupts, headers=headers)
        response = exchange.__enter__()
        return httpx2.Response(
            response.status, headers=list(response.headers.items()),
            stream=_Body(exchange, response), request=request,
        )

    def close(self) -> None:
        self._http.close()


class _Body(httpx2.SyncByteStream):
    """A response body read off the exchange; closing it ends the exchange."""

    def __init__(self, exchange: AbstractContextManager[wire.Response], response: wire.Response) -> None:
        self._exchange = exchange
        self._response = response
        self._chunks = response.chunks()
        self._ended = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            # Not `yield from`: closing this iterator early must leave the body's own
            # iterator open, for close() to drain.
            for chunk in self._chunks:  # noqa: UP028
                yield chunk
        except GeneratorExit:
            raise
        except BaseException as exc:
            # The exchange says what a failed read means (a cut, the deadline, a
            # broken connection), and lets the connection go.
            self._end(type(exc), exc, exc.__traceback__)
            raise

    def close(self) -> None:
        if self._ended:
            return
        if not self._response.complete:
            self._drain()
        self._end(None, None, None)

    def _drain(self) -> None:
        """Read what is left if it comes at once: the connection can then be kept."""
        until = time.monotonic() + DRAIN_S
        try:
            self._response.set_timeout(DRAIN_S)
            for _ in self._chunks:
                if (left := until - time.monotonic()) <= 0:
                    return
                self._response.set_timeout(left)
        except (OSError, wire.ProtocolError):
            return  # the connection is not kept

    def _end(self, kind: type[BaseException] | None, exc: BaseException | None,
             tb: TracebackType | None) -> None:
        self._ended = True
        self._exchange.__exit__(kind, exc, tb)
