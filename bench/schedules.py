"""Schedules at scale: 10,000 schedules due in the same minute, 2 worker processes.

    python -m bench.schedules [--schedules N] [--workers W] [--log-dir DIR]

A fresh stack (bench/stack.py: its own database and Redis, the API, an instant bench
model) and W `jarvis-agents worker` processes. N schedules of one user are written
straight into the database (as N creates would leave them), each with a daily cron at
the same minute, at least 20 s ahead: at that minute all N are due at once, and every
worker's firing loop races for them (README, Schedules). Reported: whether every
schedule made exactly one agent; the lag from the due time to each agent's create
(`created_at - scheduled_for`; `created_at` is stamped as the agent's batch is taken,
its commit a batch's transaction later), p50, p99 and max; the same to the agent's start
on a worker (the queueing and the workers' pace included); the time until the last agent
was made and until every agent completed; the firing loops' CPU per schedule (the
worker supervisors' own, where they run); and the machine's load, which a shared
machine shows in the tails. Targets (issue 32): every one fires exactly once; p99 lag ≤ 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select

from bench.processes import cpu_seconds
from bench.stack import Stack
from bench.stats import latency_summary
from jarvis_agents.schedules import Template
from jarvis_agents.store.models import AgentRow
from jarvis_agents.store.schedules import ScheduleRow

agents = AgentRow.__table__
schedules = ScheduleRow.__table__
LEAD_S = 20  # the due minute is at least this far ahead: every schedule is written by then
TARGET_P99_S = 10.0


def due_minute(lead_s: float = LEAD_S) -> datetime:
    """The first whole minute at least `lead_s` from now (UTC)."""
    ahead = datetime.now(UTC) + timedelta(seconds=lead_s)
    return ahead.replace(second=0, microsecond=0) + timedelta(minutes=1)


def write_schedules(engine: Any, user_id: uuid.UUID, count: int, due: datetime) -> None:
    """`count` schedules of the user, each due at `due` (a daily cron at that minute)."""
    now = datetime.now(UTC)
    rows = [{
        "id": uuid.uuid4(), "user_id": user_id, "goal": f"scheduled {n}",
        "cron": f"{due.minute} {due.hour} * * *", "timezone": "UTC",
        "template": Template().stored(), "thread": "new", "thread_id": None, "overlap": "skip",
        "enabled": True, "next_run_at": due, "last_agent_id": None, "skipped": 0,
        "created_at": now, "updated_at": now,
    } for n in range(count)]
    with engine.begin() as conn:
        for start in range(0, count, 1000):
            conn.execute(insert(schedules), rows[start:start + 1000])


def count_agents(engine: Any, *, completed: bool = False) -> int:
    query = select(func.count()).select_from(agents).where(agents.c.schedule_id.is_not(None))
    if completed:
        query = query.where(agents.c.status == "COMPLETED")
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def supervisors_cpu_s(processes: list[Any]) -> float:
    """CPU seconds of the worker supervisors alone (where the firing loops run), not of
    their Celery processes."""
    return sum(cpu_seconds(process.pid) for process in processes)


def wait_for(check: Any, timeout_s: float) -> float | None:
    """When (time.monotonic()) `check` first held, or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.2)
    return None


def run(count: int, workers: int, log_dir: Path, *, model_latency_s: float = 0.0) -> dict[str, Any]:
    with Stack(log_dir=log_dir) as stack:
        model = stack.start_model(latency_s=model_latency_s, tool_calls=0)
        supervisors = stack.start_workers(model, names=[f"worker-{n + 1}" for n in range(workers)])
        user_id, _ = stack.create_user(f"bench-schedules-{uuid.uuid4().hex[:6]}")
        due = due_minute()
        write_schedules(stack.engine, user_id, count, due)
        load_before = os.getloadavg()
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        due_at, firing_cpu_s = time.monotonic(), -supervisors_cpu_s(supervisors)
        made_at = wait_for(lambda: count_agents(stack.engine) >= count, 300)
        done_at = wait_for(lambda: count_agents(stack.engine, completed=True) >= count, 600)
        firing_cpu_s += supervisors_cpu_s(supervisors)  # the queueing of every agent included
        time.sleep(3)  # a due time fired twice would show by now
        with stack.engine.connect() as conn:
            rows = conn.execute(select(agents.c.schedule_id, agents.c.created_at,
                                       agents.c.scheduled_for, agents.c.started_at)
                                .where(agents.c.schedule_id.is_not(None))).all()
        per_schedule: dict[uuid.UUID, int] = {}
        for row in rows:
            per_schedule[row.schedule_id] = per_schedule.get(row.schedule_id, 0) + 1
        lag = latency_summary([(r.created_at - r.scheduled_for).total_seconds() for r in rows])
        start = latency_summary([(r.started_at - r.scheduled_for).total_seconds()
                                 for r in rows if r.started_at is not None])
        return {
            "schedules": count, "workers": workers, "model_latency_s": model_latency_s,
            "agents": len(rows),
            "exactly_once": len(per_schedule) == count and set(per_schedule.values()) == {1},
            "lag_p50_s": lag["p50_ms"] / 1000, "lag_p99_s": lag["p99_ms"] / 1000,
            "lag_max_s": lag["max_ms"] / 1000,
            # From the due time to a worker's start of the agent (queued, then taken).
            "start_lag_p50_s": start["p50_ms"] / 1000, "start_lag_p99_s": start["p99_ms"] / 1000,
            "all_made_after_s": made_at - due_at if made_at is not None else None,
            "all_completed_after_s": done_at - due_at if done_at is not None else None,
            "p99_target_met": lag["p99_ms"] / 1000 <= TARGET_P99_S,
            # The supervisors' own CPU (their firing loops), per schedule fired.
            "firing_cpu_ms_per_schedule": firing_cpu_s * 1000 / count,
            "load_before": load_before, "load_after": os.getloadavg(), "cpus": os.cpu_count(),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model-latency", type=float, default=0.0,
                        help="seconds each model call takes (default: an instant model)")
    parser.add_argument("--log-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench-schedules-"))
    figures = run(args.schedules, args.workers, log_dir, model_latency_s=args.model_latency)
    print(json.dumps(figures, indent=2))
    return 0 if figures["exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
