"""A small HTTP client for the jarvis-agents API (docs/api.md §2 and §4), used by the CLI.

    from jarvis_agents.cli.client import JarvisClient

    client = JarvisClient.from_env()          # JARVIS_URL, JARVIS_API_KEY or the key saved by `up`
    agent = client.create("What is 1234 * 902?")
    for event in client.events(agent["id"]):
        print(event.event, event.json())

Every failure is a JarvisError whose message is one sentence a person can act on:
ApiError for an answer with an error status, ApiUnreachable when nothing answers.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack
from urllib.parse import urlsplit

import httpx
from httpx_sse import ServerSentEvent

from jarvis_agents.cli.client_errors import ApiError, ApiUnreachable, api_error, transport_error
from jarvis_agents.cli.event_stream import EventStream
from jarvis_agents.config import default_data_dir
from jarvis_agents.errors import ConfigError, RequestError

DEFAULT_URL = "http://127.0.0.1:8000"
API = "/api/v1"
# In the data directory, written by `jarvis-agents up` (local_stack): the local user's
# key, and the URL it serves on, for the client commands when nothing else is set.
KEY_FILE = "api_key"
URL_FILE = "api_url"
TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
# The server sends a keepalive comment at least every 15 s; silence for longer is a dead link.
STREAM_READ_TIMEOUT_S = 45.0
RECONNECT_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)



class CreateOptions(TypedDict, total=False):
    """What a create may say besides its goal (docs/api.md §2); None means not said."""

    max_steps: int | None
    model: str | None
    tools: Sequence[str] | None
    webhook_url: str | None
    thread_id: str | None
    idempotency_key: str | None
    approve_tools: Sequence[str] | None
    mode: str | None
    output_schema: dict[str, Any] | None
    assistant: str | None


class JarvisClient:
    """The API as Python calls; each returns the API's JSON (dicts and lists)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 30,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`transport` replaces the network (httpx.MockTransport in tests)."""
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, timeout_s: float = 30) -> JarvisClient:
        """JARVIS_URL and JARVIS_API_KEY; when unset, the URL and the key `jarvis-agents up`
        saved in the data directory (the URL's default: http://127.0.0.1:8000)."""
        env = os.environ if env is None else env
        base_url = (env.get("JARVIS_URL") or "").strip() or _saved(env, URL_FILE) or DEFAULT_URL
        parts = urlsplit(base_url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ConfigError(
                f"JARVIS_URL is not a valid URL: {base_url!r} (expected e.g. {DEFAULT_URL})"
            )
        api_key = (env.get("JARVIS_API_KEY") or "").strip() or _saved(env, KEY_FILE)
        if not api_key:
            raise ConfigError(
                "no API key: set JARVIS_API_KEY (`jarvis-agents users create NAME` prints one), "
                "or run `jarvis-agents up`, which saves a local key"
            )
        return cls(base_url, api_key, timeout_s=timeout_s)

    # --- agents -------------------------------------------------------------------------

    def create(self, goal: str, **options: Unpack[CreateOptions]) -> dict[str, Any]:
        """Start an agent (202); the agent JSON, PENDING."""
        body, headers = _create_request(goal, options)
        return self._json("POST", f"{API}/agents", json=body, headers=headers)

    def get(self, agent_id: str, *, wait: float | None = None) -> dict[str, Any]:
        """One agent; with `wait`, the server holds the answer until it ends or `wait` s pass."""
        path = f"{API}/agents/{_agent_id(agent_id)}"
        if wait is None:
            return self._json("GET", path, agent_id=agent_id)
        return self._json(
            "GET", path, params={"wait": _number(wait)}, agent_id=agent_id,
            timeout=max(self.timeout_s, wait + 10),
        )

    def list(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None,
        thread_id: str | None = None, caller_id: str | None = None,
    ) -> dict[str, Any]:
        """`{"agents": [...], "next_cursor": …}`, newest first (of a thread, or a caller's)."""
        said = (("status", status), ("limit", limit), ("cursor", cursor), ("caller_id", caller_id),
                ("thread_id", _agent_id(thread_id, what="a thread") if thread_id is not None else None))
        params = {k: v for k, v in said if v is not None}
        return self._json("GET", f"{API}/agents", params=params)

    def fork(self, agent_id: str, *, after_seq: int, goal: str | None = None,
             model: str | None = None, max_steps: int | None = None,
             mode: str | None = None) -> dict[str, Any]:
        """A new agent from a copy of this ended one's steps 1..after_seq (202); the agent JSON."""
        said = {"goal": goal, "model": model, "max_steps": max_steps, "mode": mode}
        body = {"after_seq": after_seq, **{k: v for k, v in said.items() if v is not None}}
        return self._json("POST", f"{API}/agents/{_agent_id(agent_id)}/fork", json=body,
                          agent_id=agent_id)

    def steps(self, agent_id: str, *, after: int | None = None) -> list[dict[str, Any]]:
        """The agent's steps in `seq` order (those after `after`)."""
        params = {"after": after} if after is not None else None
        body = self._json("GET", f"{API}/agents/{_agent_id(agent_id)}/steps", params=params, agent_id=agent_id)
        return list(body["steps"])

    def cancel(self, agent_id: str) -> dict[str, Any]:
        """Cancel a PENDING or RUNNING agent; ApiError 409 if it has already ended."""
        return self._json("DELETE", f"{API}/agents/{_agent_id(agent_id)}", agent_id=agent_id)

    def approve(
        self, agent_id: str, call_id: str, *, approve: bool, tool_input: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Answer a WAITING agent's call (202: it goes on); ApiError 409 if it is not waiting
        for that call."""
        body: dict[str, Any] = {"call_id": call_id, "approve": approve}
        if tool_input is not None:
            body["input"] = tool_input
        if reason is not None:
            body["reason"] = reason
        return self._json("POST", f"{API}/agents/{_agent_id(agent_id)}/approval", json=body,
                          agent_id=agent_id)

    def tools(self) -> list[dict[str, Any]]:
        """`[{"name", "description", "source", "input_schema"}, …]`: the tools an agent may use."""
        return list(self._json("GET", f"{API}/tools")["tools"])

    # --- events ---------------------------------------------------------------------------

    def events(
        self, agent_id: str, *, last_event_id: str | int | None = None, reconnect: bool = True,
        tokens: bool = False,
    ) -> Iterator[ServerSentEvent]:
        """Follow an agent's events until `done` (joining does not cancel it).

        A dropped connection is re-joined with `Last-Event-ID`, so each step arrives
        once; with `reconnect=False` it ends the iteration with ApiUnreachable instead.
        With `tokens`, live `token` events too (a reply's text as it is written).
        """
        path = f"{API}/agents/{_agent_id(agent_id)}/events" + ("?tokens=1" if tokens else "")
        last = str(last_event_id) if last_event_id is not None else None
        failures = 0
        while True:
            headers = {"Last-Event-ID": last} if last is not None else {}
            try:
                with self._open_stream("GET", path, headers=headers, agent_id=agent_id) as stream:
                    for event in stream:
                        failures = 0
                        if event.id:
                            last = event.id
                        yield event
                        if event.event == "done":
                            return
            except ApiUnreachable:
                if not reconnect or failures >= len(RECONNECT_DELAYS_S):
                    raise
            else:
                if not reconnect or failures >= len(RECONNECT_DELAYS_S):
                    raise ApiUnreachable(
                        f"the event stream of agent {agent_id} ended before its `done` event"
                    )
            # The link dropped, or the stream ended early: join again after the last seq.
            time.sleep(RECONNECT_DELAYS_S[failures])
            failures += 1

    def stream_create(self, goal: str, *, tokens: bool = False,
                      **options: Unpack[CreateOptions]) -> tuple[str, EventStream]:
        """Start an agent and stream its events (with `tokens`, live `token` events too);
        closing the stream cancels the agent."""
        body, headers = _create_request(goal, options)
        path = f"{API}/agents/stream" + ("?tokens=1" if tokens else "")
        stream = self._open_stream("POST", path, json=body, headers=headers)
        match = re.search(r"/agents/([0-9a-fA-F-]{36})", stream.response.headers.get("Location", ""))
        if match is None:
            stream.close()
            raise ApiError(502, "bad_response", "the API did not say which agent it started (no Location)")
        return match.group(1), stream

    # --- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _json(
        self,
        method: str,
        path: str,
        *,
        agent_id: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        try:
            response = self._http.request(
                method, path, timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                **kwargs,
            )
        except httpx.TransportError as exc:
            raise transport_error(exc, self.base_url) from None
        if response.status_code >= 400:
            raise api_error(response, agent_id)
        if response.status_code == 204:  # done, nothing to say (a DELETE)
            return None
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                502, "bad_response", f"the API at {self.base_url} answered {path} with something other than JSON"
            ) from None

    def _open_stream(self, method: str, path: str, *, agent_id: str | None = None, **kwargs: Any) -> EventStream:
        kwargs["headers"] = {**kwargs.get("headers", {}), "Accept": "text/event-stream"}
        timeout = httpx.Timeout(self.timeout_s, read=max(self.timeout_s, STREAM_READ_TIMEOUT_S))
        request = self._http.build_request(method, path, timeout=timeout, **kwargs)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise transport_error(exc, self.base_url) from None
        if response.status_code >= 400:
            try:
                response.read()
            except httpx.TransportError as exc:
                raise transport_error(exc, self.base_url) from None
            finally:
                response.close()
            raise api_error(response, agent_id)
        return EventStream(response, self.base_url)


def _create_request(goal: str, options: CreateOptions) -> tuple[dict[str, Any], dict[str, str]]:
    """The create body (the options said, and only those) and its headers."""
    said = {name: value for name, value in options.items() if value is not None}
    key = said.pop("idempotency_key", None)
    for listed in ("tools", "approve_tools"):
        if listed in said:
            said[listed] = list(said[listed])
    return {"goal": goal, **said}, {"Idempotency-Key": key} if key else {}


def _agent_id(value: str, *, what: str = "an agent") -> str:
    """Refuse anything but a UUID before it reaches a URL; `what` the id names (a thread's
    is its first agent's)."""
    try:
        return str(uuid.UUID(str(value).strip()))
    except ValueError:
        raise RequestError(
            f"{value!r} is not {what} id "
            "(expected a UUID such as 3f2c8a4e-…)", code="invalid_id"
        ) from None


def _number(value: float) -> str:
    return f"{value:g}"


def _saved(env: Mapping[str, str], name: str) -> str | None:
    """What `jarvis-agents up` saved as `name` in the data directory, if anything."""
    try:
        return (default_data_dir(env) / name).read_text().strip() or None
    except OSError:
        return None
