"""Outages of PostgreSQL connections, injected into a running system.

Restarts of the PostgreSQL and Redis servers themselves: test_restarts.py; webhook
receivers' outages: test_webhooks.py."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text

from jarvis_agents.lifecycle import AgentStatus
from tests.faults.conftest import System
from tests.faults.test_worker_death import assert_clean_history


def test_postgres_connections_cut_mid_agent(system: System, fake_ollama: Any, start_worker: Any,
                                            pg_url: str) -> None:
    fake_ollama.latency_s = 1.0
    start_worker(system.env)
    agent = system.create()
    system.wait_until(lambda: len(system.repository.steps_after(agent.id)) >= 1, 20, "first step")
    name = pg_url.rsplit("/", 1)[1]
    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = :name AND pid <> pg_backend_pid()"), {"name": name}).scalar_one()
    admin.dispose()
    assert killed >= 1
    done = system.terminal(agent.id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert (done.attempt, done.losses) == (1, 0)  # its worker was never lost
    assert_clean_history(system, agent.id)
