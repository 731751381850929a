"""Keep-alive connections to the model server that cost the same with 1 or 300 in use.

Why not one shared pool: httpcore (1.0) scans its whole pool for every idle
connection on each request and each response end — quadratic in the pool's size.
With 200 connections kept alive a worker whose 200 agents wait on the model spent
four times the CPU of the calls themselves in that scan; with a small keep-alive
limit it closes idle connections whenever the pool is larger, so a busy worker
opened a new connection (a handshake on both ends, a thread in some servers) for
every call. Here each reader borrows one connection (an `http1.Connection`, or a
one-connection httpx client when a proxy is in the way) and gives it back when its
reply is read: O(1) per call, one lock held for a list operation, and a connection
kept alive per reader in use at the peak.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

import httpx


class _Closable(Protocol):
    def close(self) -> Any: ...


C = TypeVar("C", bound=_Closable)


class ClientLender(Generic[C]):
    """Lends connections (or one-connection clients) to one caller at a time, warmest first."""

    def __init__(self, make: Callable[[], C], *, max_idle: int = 256) -> None:
        self._make = make
        self._max_idle = max_idle
        self._idle: list[C] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def like(cls, template: httpx.Client, *, max_idle: int = 256) -> ClientLender[httpx.Client]:
        """Clients with `template`'s base URL, headers, timeouts and redirect rule."""
        # One TLS context for all of them: building one loads the CA bundle (~20 ms).
        context = httpx.create_ssl_context()
        return cls(lambda: _single(template, context), max_idle=max_idle)

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    @contextmanager
    def lend(self) -> Iterator[C]:
        """A client for the block's duration; the most recently returned one first."""
        with self._lock:
            client = self._idle.pop() if self._idle else None
        if client is None:
            client = self._make()
        try:
            yield client
        finally:
            with self._lock:
                keep = not self._closed and len(self._idle) < self._max_idle
                if keep:
                    self._idle.append(client)
            if not keep:
                client.close()

    def close(self) -> None:
        """Close the idle clients now and each lent one when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()


def _single(template: httpx.Client, context: ssl.SSLContext) -> httpx.Client:
    return httpx.Client(
        base_url=template.base_url,
        headers=template.headers,
        timeout=template.timeout,
        follow_redirects=template.follow_redirects,
        verify=context,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
    )
