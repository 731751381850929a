"""One open SSE response of the API, as the CLI client reads it."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from jarvis_agents.cli.client_errors import ApiError, transport_error


class EventStream:
    """The events of one open SSE response, parsed by httpx-sse; iterate it, then close it
    (or use `with`). An event's `id` is the stream's last event id (WHATWG), so `done`
    carries the seq to resume from."""

    def __init__(self, response: httpx.Response, base_url: str) -> None:
        self.response = response
        self._base_url = base_url
        self._events = EventSource(response).iter_sse()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ServerSentEvent:
        try:
            while True:
                event = next(self._events)
                # httpx-sse ≤ 0.4.3 makes an empty event of each keepalive after an event
                # with an id (florimondmanca/httpx-sse#35); the WHATWG rules dispatch no
                # event without data, and every event of the API has some.
                if event.data:
                    return event
        except StopIteration:
            self.close()
            raise
        except SSEError:  # a TransportError too: the answer was not an event stream
            self.close()
            raise ApiError(
                502, "bad_response", f"the API at {self._base_url} did not answer with an event stream"
            ) from None
        except httpx.TransportError as exc:
            self.close()
            raise transport_error(exc, self._base_url) from None

    def close(self) -> None:
        self.response.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
