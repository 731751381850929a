"""The benchmark's client processes: a failing client stops the run at once, with its reason."""

from __future__ import annotations

import socket

import pytest

from bench.clients import post_concurrently


# At once: a run that waited for the clients' barrier (120 s) or for its own timeout
# would outlast this test's.
@pytest.mark.timeout(60)
def test_a_client_that_cannot_connect_fails_the_run_with_its_reason() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RuntimeError, match="ConnectionRefusedError"):
        post_concurrently(
            f"http://127.0.0.1:{port}", "/api/v1/agents",
            headers=[{}, {}], bodies=[[b"{}"], [b"{}"]], rate_per_s=10.0, timeout_s=3600,
        )
