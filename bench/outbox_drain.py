"""What the webhook dispatcher costs per delivery, alone: owed rows drained to a receiver.

    JARVIS_BENCH_PG=postgresql+psycopg2://… python -m bench.outbox_drain [--deliveries N] [--rounds R]

N agents with a `webhook_url` are completed (each owes a delivery), then a started
WebhookDispatcher (threads and sizes as in a worker) sends them all to
`bench.webhook_receiver`. Reported per delivery: the CPU of the dispatcher's own threads
(read from /proc, so the harness's polling does not count) and PostgreSQL's (every
process of the server: keep it private, nothing else should run on it). The owing
itself, in the terminal transition, is not counted: scenario 5 (bench/webhooks.py)
measures the whole. The signed POST alone costs what scenario 5 reports as its floor.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import threading
import time

from sqlalchemy import create_engine, text

from bench.processes import server_cpu_seconds
from bench.stack import PG_ADMIN_URL
from bench.webhook_receiver import fetch_deliveries
from jarvis_agents.config import Settings
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine, upgrade
from jarvis_agents.store.repository import Repository
from jarvis_agents.webhooks.dispatcher import WebhookDispatcher


def threads_cpu_s(threads: list[threading.Thread]) -> float:
    """CPU seconds of these threads of this process (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for thread in threads:
        with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def owe(repository: Repository, url: str, n: int) -> None:
    user, _ = repository.users.create(f"drain-{secrets.token_hex(4)}")
    for i in range(n):
        agent, _ = repository.create_agent(
            Agent.new(user_id=user.id, goal=f"g{i}", model="m", max_steps=5, webhook_url=url))
        claimed = repository.claim(agent.id)
        assert claimed is not None
        repository.transition(
            agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=claimed.attempt,
            steps=[Step(1, 0, StepType.FINAL, "42", created_at=utcnow())], final_answer="42",
            stop_reason=StopReason.FINAL_ANSWER, step_count=1)


def drain(repository: Repository, settings: Settings, receiver: str, n: int) -> tuple[float, float, float]:
    """(dispatcher ms, PostgreSQL ms per delivery, seconds) to deliver the n owed."""
    with repository.engine.connect() as conn:
        backend = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    dispatcher = WebhookDispatcher.from_settings(repository, settings)
    assert dispatcher is not None
    postgres0, began = server_cpu_seconds(backend), time.monotonic()
    dispatcher.start()
    try:
        while len(fetch_deliveries(receiver)) < n:
            time.sleep(0.1)
        took = time.monotonic() - began
        while True:  # recorded delivered: the record belongs to the cost
            with repository.engine.connect() as conn:
                if not conn.execute(text(
                        "SELECT count(*) FROM webhook_deliveries WHERE delivered_at IS NULL")).scalar_one():
                    break
            time.sleep(0.1)
        spent = threads_cpu_s(dispatcher.threads)
        postgres = server_cpu_seconds(backend) - postgres0
    finally:
        dispatcher.stop()
    return spent * 1000 / n, postgres * 1000 / n, took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outbox_drain")
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18090)
    args = parser.parse_args(argv)
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"outbox_drain_{secrets.token_hex(3)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    receiver = subprocess.Popen([sys.executable, "-m", "bench.webhook_receiver",
                                 "--port", str(args.port)], stdout=subprocess.PIPE)
    repository = None
    try:
        assert receiver.stdout is not None
        receiver.stdout.readline()  # listening
        receiver_url = f"http://127.0.0.1:{args.port}"
        upgrade(url)
        repository = repository_for(make_engine(url))
        settings = Settings.from_env({"JARVIS_WEBHOOK_SECRET": "bench",
                                      "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1"})
        for number in range(args.rounds):
            owe(repository, f"{receiver_url}/hook", args.deliveries)
            fetch_deliveries(receiver_url, clear=True)
            ours, postgres, took = drain(repository, settings, receiver_url, args.deliveries)
            print(f"round {number + 1}: {args.deliveries} deliveries in {took:.2f} s; "
                  f"dispatcher {ours:.3f} ms, PostgreSQL {postgres:.3f} ms of CPU per delivery",
                  flush=True)
    finally:
        receiver.terminate()
        if repository is not None:
            repository.engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
