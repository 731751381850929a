"""The Ollama adapter: a ChatModel over Ollama's `/api/chat`, streamed and interruptible.

The reply is streamed (`"stream": true`) so that a cancellation or the step
deadline takes effect mid-reply. It is read on the calling thread: handing the
read to another thread and waiting for it cost a thread switch each way per model
call (CPU, and up to a GIL switch interval of latency under load). What may
interrupt a read that is silent for seconds comes from outside and shuts the
connection's socket down (`jarvis_agents.llm.interrupts`). No read waits past the
step deadline (its timeout ends there), and a reply that trickles is checked
against the deadline and the cancellation between chunks.

Why the stream is read with `jarvis_agents.llm.http1` on kept-alive connections,
and `json.loads` per line, rather than `Client.chat(stream=True)`: that builds a
pydantic model per message sent and per NDJSON chunk received (a reply is a dozen
chunks), and it leaves the response unread after the last chunk, so httpx drops the
connection and every call opened a new one; and httpx's own request path (httpcore,
h11) cost a third of a call's CPU for features this call does not use. When an
environment proxy applies to the server, replies are read with httpx clients made
like the `ollama` client's own instead, which honour it. The `ollama` client still
owns the connection settings (host parsing, headers, `OLLAMA_API_KEY`) and the
readiness calls, and its `ResponseError` carries the server's failures.

Failures are sorted here, once: transient ones (connection refused or reset,
timeouts, HTTP 5xx and 429, a stream cut short) are retried by
`jarvis_agents.retry.model_call_policy`; an unknown model and other 4xx answers are not.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self, TypedDict

import httpx
import ollama

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ModelError, ModelNotFound, ModelUnavailable
from jarvis_agents.llm import http1
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.llm.connections import ClientLender
from jarvis_agents.llm.interrupts import WATCHDOG, Call, Interrupts
from jarvis_agents.retry import TransientModelError, model_call_policy

# A read timeout that ends at the step deadline should find the deadline passed.
_DEADLINE_MARGIN_S = 0.005


class PingResult(TypedDict):
    """What a readiness check learns from the Ollama server."""

    reachable: bool
    models: list[str]
    error: str | None


class OllamaChatModel:
    """ChatModel over an Ollama server (see `jarvis_agents.llm.base.ChatModel`)."""

    def __init__(
        self,
        *,
        host: str,
        retries: int = 3,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
    ) -> None:
        if retries < 1:
            raise ValueError(f"retries counts attempts and must be at least 1, not {retries}")
        self.host = host.rstrip("/")
        self.retries = retries
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        # The ollama client owns the connection settings (host parsing, headers,
        # OLLAMA_API_KEY); replies are read on one-connection clients made like its
        # httpx.Client, lent to one reader at a time (see llm/connections.py for why
        # not on that client's own pool). No cap on connections: abandoned readers
        # hold one until their next chunk, and a worker running 100 agents must not
        # queue behind them; Ollama itself limits how many replies it generates.
        self._client = ollama.Client(
            host=self.host, timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        )
        template = self._client._client
        # Relative to the base URL, as the client's own calls are: an OLLAMA_HOST with
        # a path (a reverse proxy at /ollama) keeps it. httpx ends base_url with "/".
        self._chat_url = template.base_url.join("api/chat")
        self._headers = httpx.Headers(template.headers)
        self._headers["Content-Type"] = "application/json"
        self._proxied = _proxy_applies(self._chat_url)
        if self._proxied:
            self._connections: ClientLender[Any] = ClientLender.like(template)
        else:
            origin, self._request_head = _request_head(self._chat_url, self._headers)
            self._connections = ClientLender(lambda: http1.Connection(origin))

    @classmethod
    def from_settings(cls, settings: Settings) -> OllamaChatModel:
        # A read that waits longer than a whole step can never be useful.
        return cls(
            host=settings.ollama_host,
            retries=settings.model_retries,
            read_timeout_s=settings.step_timeout_s,
        )

    def close(self) -> None:
        self._connections.close()
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- the ChatModel protocol ------------------------------------------------------

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        stop: Sequence[str],
        deadline: float,
        should_stop: Callable[[], bool],
    ) -> str:
        interrupts = Interrupts(should_stop, deadline, deadline - time.monotonic())
        interrupts.check()
        payload = [{"role": m.role, "content": m.content} for m in messages]
        stops = [s for s in stop if s]
        policy = model_call_policy(
            self.retries,
            sleep=interrupts.sleep,
            initial_s=self.backoff_initial_s,
            max_s=self.backoff_max_s,
            what=f"chat with {model} at {self.host}",
        )
        attempts = 0
        try:
            for attempt in policy:
                with attempt:
                    attempts += 1
                    reply = self._attempt(payload, model=model, stop=stops, interrupts=interrupts)
                    return _cut_at_stop(reply, stops)
        except TransientModelError as exc:
            raise ModelUnavailable(self._unavailable_message(exc, attempts)) from exc
        raise AssertionError("unreachable: the retry policy re-raises the last failure")

    # --- one attempt -----------------------------------------------------------------

    def _attempt(
        self, payload: list[dict[str, str]], *, model: str, stop: list[str], interrupts: Interrupts
    ) -> str:
        """One streamed request, read on this thread; a cancel shuts its socket down."""
        body = {"model": model, "messages": payload, "stream": True, "options": {"stop": stop}}
        call = Call()

        def woken() -> None:
            if interrupts.should_stop():
                call.abandon()

        with interrupts.waking(woken), WATCHDOG.watching(call, interrupts):
            interrupts.check()
            try:
                reply = self._read(call, body, interrupts)
            except Exception as exc:
                if call.abandoned:  # only ever for a should_stop() seen True
                    raise Cancelled("the agent was cancelled while waiting for the model") from None
                if time.monotonic() >= interrupts.deadline:
                    interrupts.check()
                if isinstance(exc, ModelError):
                    raise
                classified = self._classify(exc, model)
                raise classified from exc
            if reply is None:  # abandoned, or the deadline passed, between two chunks
                if not call.abandoned:
                    interrupts.check()
                raise Cancelled("the agent was cancelled while waiting for the model")
            return reply

    def _read(self, call: Call, body: dict[str, object], interrupts: Interrupts) -> str | None:
        if self._proxied:
            return self._read_httpx(call, body, interrupts)
        deadline = interrupts.deadline

        def attach(sock: socket.socket) -> None:
            # Before the connect and the TLS handshake, so that a cancel cuts those
            # short too. A socket not yet connecting ignores shutdown(): look first.
            call.attach(sock)
            if call.abandoned:
                raise http1.ConnectFailed("the call was abandoned")

        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        head = self._request_head + b"%d\r\n\r\n" % len(payload)
        # No wait goes past the step deadline: a silent server ends in a timeout then.
        # Each read's timeout is set when it starts (http1), not once for the call.
        wait_until = deadline + _DEADLINE_MARGIN_S
        with self._connections.lend() as connection:
            keep = False
            try:
                for last_try in (False, True):
                    left_s = max(wait_until - time.monotonic(), 0.0)
                    connection.open(
                        connect_timeout_s=min(self.connect_timeout_s, left_s), attach=attach)
                    try:
                        response = connection.request(
                            head, payload, read_timeout_s=self.read_timeout_s,
                            deadline=wait_until)
                        break
                    except http1.ConnectionBroke as exc:
                        # A kept-alive connection the server had just closed: once more
                        # on a new one, as the request was never processed.
                        connection.close()
                        if last_try or not exc.retry_fresh or call.abandoned:
                            raise
                if not 200 <= response.status < 300:
                    text = response.read().decode("utf-8", errors="replace")
                    keep = response.reusable
                    raise ollama.ResponseError(text, response.status)
                reply = _read_to_end(response.iter_body(), call, deadline)
                keep = reply is not None and response.reusable
                return reply
            finally:
                # Let go before the connection is lent again: a cancellation of this
                # call that lands late must not cut the next borrower's reply. A
                # connection this call cut is not kept.
                if call.detach() or not keep:
                    connection.close()

    def _read_httpx(
        self, call: Call, body: dict[str, object], interrupts: Interrupts
    ) -> str | None:
        """`_read` through httpx, which honours the environment's proxy settings."""
        deadline = interrupts.deadline
        with self._connections.lend() as http:

            def trace(event: str, info: dict[str, object]) -> None:
                # A new connection (the first, or after the server closed the last):
                # remember its stream for this client's later calls, and attach it.
                if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                    stream = info.get("return_value")
                    http._jarvis_stream = stream  # type: ignore[attr-defined]
                    call.attach(stream)

            # No read waits past the step deadline: a silent server ends in a timeout then.
            left_s = max(deadline - time.monotonic(), 0.0) + _DEADLINE_MARGIN_S
            timeout = httpx.Timeout(
                min(self.read_timeout_s, left_s), connect=min(self.connect_timeout_s, left_s)
            )
            # Straight to the client's transport with a request built here: the
            # client's own send adds URL merging, auth and redirect handling and a
            # cookie jar update per response, a third of a call's CPU, none of it
            # needed. The transport still maps httpcore's errors to httpx's.
            request = httpx.Request(
                "POST", self._chat_url, headers=self._headers,
                content=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
                extensions={"timeout": timeout.as_dict(), "trace": trace},
            )
            call.attach(getattr(http, "_jarvis_stream", None))
            try:
                response = http._transport_for_url(self._chat_url).handle_request(request)
                try:
                    if not response.is_success:
                        response.read()
                        raise ollama.ResponseError(response.text, response.status_code)
                    return _read_to_end(response.iter_bytes(), call, deadline)
                finally:
                    response.close()
            finally:
                # Let go before the client is lent again (see `_read`). A stream this
                # call cut is readable while idle: httpcore replaces it before reuse.
                call.detach()

    # --- errors ----------------------------------------------------------------------

    def _classify(self, exc: Exception, model: str) -> Exception:
        if isinstance(exc, ollama.ResponseError):
            status, message = exc.status_code, str(exc.error)
            if status == 404 or (status == -1 and "not found" in message.lower()):
                return ModelNotFound(model)
            if status == 429 or status >= 500:
                return TransientModelError(f"HTTP {status}: {message}")
            if status == -1:  # an {"error": …} line in the middle of the stream
                return TransientModelError(f"the server failed mid-reply: {message}")
            return ModelError(
                f"the Ollama server at {self.host} refused the request (HTTP {status}): {message}"
            )
        if isinstance(exc, http1.ConnectFailed):
            if exc.timed_out:
                return TransientModelError(
                    f"no connection within {self.connect_timeout_s:g} s", unreachable=True
                )
            return TransientModelError(str(exc), unreachable=True)
        if isinstance(exc, http1.ReadTimedOut):
            return TransientModelError(f"no data for {self.read_timeout_s:g} s (read timeout)")
        if isinstance(exc, http1.ConnectionBroke):
            return TransientModelError(f"the connection broke mid-reply: {exc}")
        if isinstance(exc, httpx.ConnectTimeout):
            return TransientModelError(
                f"no connection within {self.connect_timeout_s:g} s", unreachable=True
            )
        if isinstance(exc, httpx.TimeoutException):
            return TransientModelError(f"no data for {self.read_timeout_s:g} s (read timeout)")
        if isinstance(exc, (httpx.ConnectError, ConnectionError)):
            return TransientModelError(_reason(exc), unreachable=True)
        if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError)):
            return TransientModelError(f"the connection broke mid-reply: {_reason(exc)}")
        return ModelError(f"unexpected failure talking to the Ollama server at {self.host}: {exc!r}")

    def _unavailable_message(self, exc: TransientModelError, attempts: int) -> str:
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if exc.unreachable:
            return f"could not reach the Ollama server at {self.host} after {tries}: {exc.reason}"
        return f"the Ollama server at {self.host} kept failing after {tries}: {exc.reason}"

    # --- readiness -------------------------------------------------------------------

    def ping(self, *, timeout_s: float = 2.0) -> PingResult:
        """GET /api/tags: is the server up, and which models has it pulled."""
        try:
            # A short-lived client of its own: the shared one's timeouts suit replies,
            # not a readiness probe that must answer in a couple of seconds.
            with ollama.Client(host=self.host, timeout=timeout_s) as client:
                listing = client.list()
        except ollama.ResponseError as exc:
            return {"reachable": False, "models": [], "error": f"HTTP {exc.status_code}: {exc.error}"}
        except httpx.TimeoutException:
            return {"reachable": False, "models": [], "error": f"no answer within {timeout_s:g} s"}
        except (ConnectionError, httpx.HTTPError) as exc:
            # The client turns httpx.ConnectError into a generic ConnectionError; the
            # original (with the OS's reason) is still its __context__.
            cause = exc.__context__ if isinstance(exc.__context__, Exception) else exc
            return {"reachable": False, "models": [], "error": _reason(cause)}
        models = [m.model for m in listing.models if m.model]
        return {"reachable": True, "models": models, "error": None}

    def has_model(self, name: str, *, timeout_s: float = 2.0) -> bool:
        """Whether the server has pulled `name` ("llama3.2" matches "llama3.2:latest")."""
        wanted = _with_tag(name)
        return any(_with_tag(m) == wanted for m in self.ping(timeout_s=timeout_s)["models"])


def _proxy_applies(url: httpx.URL) -> bool:
    """Whether an environment proxy (HTTP_PROXY, ALL_PROXY …, less NO_PROXY) covers `url`."""
    proxies = urllib.request.getproxies()
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(url.host)


def _request_head(url: httpx.URL, headers: httpx.Headers) -> tuple[http1.Origin, bytes]:
    """Where `url` is, and its POST's head up to the Content-Length value."""
    tls = httpx.create_ssl_context() if url.scheme == "https" else None
    port = url.port or (443 if url.scheme == "https" else 80)
    host_header = url.netloc.decode("ascii")
    origin = http1.Origin(url.host, port, host_header, tls)
    skip = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
    lines = [f"POST {url.raw_path.decode('ascii')} HTTP/1.1", f"Host: {host_header}"]
    lines += [f"{k}: {v}" for k, v in headers.multi_items() if k.lower() not in skip]
    lines += ["Accept-Encoding: identity", "Content-Length: "]
    return origin, "\r\n".join(lines).encode("latin-1")


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _read_to_end(chunks: Iterator[bytes], call: Call, deadline: float) -> str | None:
    """The reply (None once the call is abandoned or the deadline has passed), then the
    rest of the stream, normally just its terminating chunk, so that the connection
    can carry the next call."""
    reply = _read_reply(chunks, lambda: call.abandoned or time.monotonic() >= deadline)
    if reply is not None:
        for _ in chunks:
            pass
    return reply


def _read_reply(chunks: Iterator[bytes], quit_now: Callable[[], bool]) -> str | None:
    """The reply's text from Ollama's NDJSON stream, up to its `done` line.

    None once `quit_now()` says so (looked at before each chunk). Raises ollama.ResponseError for an {"error": …}
    line and TransientModelError when the stream ends before its `done` line.
    """
    parts: list[str] = []
    pending = b""
    for data in chunks:
        if quit_now():
            return None
        *lines, pending = (pending + data).split(b"\n")
        if lines and _read_lines(lines, parts):
            return "".join(parts)
    if _read_lines([pending], parts):  # a last line without its newline
        return "".join(parts)
    raise TransientModelError("the reply stream ended before the reply was complete")


def _read_lines(lines: list[bytes], parts: list[str]) -> bool:
    """Adds the text of NDJSON lines to `parts`; True once one is the `done` line.

    The lines one read brought (a token each) are decoded in one `json.loads`, as an
    array: a call per line cost more than the decoding itself. Only if that fails
    are they decoded one by one, so that nothing after the `done` line is looked at.
    """
    lines = [line for line in lines if line.strip()]
    if not lines:
        return False
    try:
        decoded = json.loads(b"[" + b",".join(lines) + b"]") if len(lines) > 1 else None
    except ValueError:
        decoded = None
    for index, line in enumerate(lines):
        part = decoded[index] if decoded is not None else json.loads(line)
        if error := part.get("error"):
            raise ollama.ResponseError(error)
        content = (part.get("message") or {}).get("content")
        if content:
            parts.append(content)
        if part.get("done"):
            return True
    return False


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    # Ollama already stops before a stop sequence; this keeps the promise even
    # against a server or proxy that ignores the option.
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text


def _reason(exc: BaseException) -> str:
    """'[Errno 111] Connection refused' → 'connection refused'."""
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc)).strip()
    if not text:
        return type(exc).__name__
    return text[0].lower() + text[1:]
