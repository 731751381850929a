"""Driving our A2A server with the official `a2a-sdk` client (README, A2A), from sync tests.

    with A2A(api_url, api_key) as a2a:
        task = a2a.send("What is 1234 * 902?")
        events = a2a.stream("…")

Each call runs the SDK's async client on this object's own event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Self

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict


def message(text: str | None = None, *, data: Any = None, task_id: str = "", context_id: str = "",
            assistant: str | None = None, message_id: str | None = None) -> Message:
    parts = []
    if text is not None:
        parts.append(Part(text=text))
    if data is not None:
        parts.append(Part(data=ParseDict(data, struct_pb2.Value())))
    out = Message(message_id=message_id or str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts,
                  task_id=task_id, context_id=context_id)
    if assistant is not None:
        out.metadata.CopyFrom(ParseDict({"assistant": assistant}, struct_pb2.Struct()))
    return out


class A2A:
    """The SDK's client of one user on one server, its card read from the well-known URL."""

    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 60.0) -> None:
        self.loop = asyncio.new_event_loop()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(headers=headers, timeout=timeout_s)
        self.blocking = self.run(ClientFactory(ClientConfig(
            streaming=False, httpx_client=self.http)).create_from_url(url))
        self.streaming = self.run(ClientFactory(ClientConfig(
            streaming=True, httpx_client=self.http)).create_from_url(url))

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.run(self.http.aclose())
        self.loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- the methods ----------------------------------------------------------------------

    def send(self, text: str | Message, *, return_immediately: bool = False,
             history_length: int | None = None) -> Task:
        """SendMessage (not streamed): the task it answers with."""
        request = self._request(text, return_immediately=return_immediately,
                                history_length=history_length)

        async def first() -> Task:
            async for event in self.blocking.send_message(request):
                return event.task
            raise AssertionError("SendMessage answered nothing")

        return self.run(first())

    def stream(self, text: str | Message, *,
               until: Callable[[StreamResponse], bool] | None = None) -> list[StreamResponse]:
        """SendStreamingMessage: its events, up to the one `until` accepts (then hang up)."""
        return self._collect(self.streaming.send_message(self._request(text)), until)

    def subscribe(self, task_id: str, *,
                  until: Callable[[StreamResponse], bool] | None = None) -> list[StreamResponse]:
        return self._collect(self.streaming.subscribe(SubscribeToTaskRequest(id=task_id)), until)

    def get(self, task_id: str, *, history_length: int | None = None) -> Task:
        request = GetTaskRequest(id=task_id)
        if history_length is not None:
            request.history_length = history_length
        return self.run(self.blocking.get_task(request))

    def list(self, **fields: Any) -> ListTasksResponse:
        return self.run(self.blocking.list_tasks(ListTasksRequest(**fields)))

    def cancel(self, task_id: str) -> Task:
        return self.run(self.blocking.cancel_task(CancelTaskRequest(id=task_id)))

    def extended_card(self) -> Any:
        return self.run(self.blocking.get_extended_agent_card(GetExtendedAgentCardRequest()))

    def _request(self, text: str | Message, *, return_immediately: bool = False,
                 history_length: int | None = None) -> SendMessageRequest:
        configuration = SendMessageConfiguration(return_immediately=return_immediately)
        if history_length is not None:
            configuration.history_length = history_length
        return SendMessageRequest(
            message=message(text) if isinstance(text, str) else text, configuration=configuration)

    def _collect(self, events: AsyncIterator[StreamResponse],
                 until: Callable[[StreamResponse], bool] | None) -> list[StreamResponse]:
        async def collect() -> list[StreamResponse]:
            seen = []
            async for event in events:
                seen.append(event)
                if until is not None and until(event):
                    break
            await events.aclose()  # type: ignore[attr-defined]
            return seen

        return self.run(collect())
