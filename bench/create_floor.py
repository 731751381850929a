"""Scenario 1's create floor: the issue's "minimal Flask INSERT + send_task", run here.

A Flask app with one view, served as ours is (gunicorn, one gevent worker, psycopg2
waiting on the gevent loop) and, to tell what gevent itself costs, by gunicorn's
threaded worker (gthread, psycopg2 blocking in C), on the same PostgreSQL and Redis.
`POST /api/v1/agents` reads the JSON body, INSERTs one row (id, goal, created_at) in
autocommit — one durable commit — sends one Celery task with `send_task` to a queue
nobody consumes, and answers 202 with the id. No authentication, no validation beyond the JSON, no
limits, no idempotency, no status event: what a create costs with this server, these
clients and these cores before any of the work ours does. The same client processes
drive it as drive the API, so create latency ÷ floor is what the API adds.

Run by the harness as `gunicorn … bench.create_floor:app` with `DATABASE_URL` (a
psycopg2 URL) and `REDIS_URL` in the environment.
"""

from __future__ import annotations

import os
import uuid
from queue import LifoQueue
from typing import Any

TABLE = "bench_floor_agents"
QUEUE = "bench-floor"


def _green_psycopg2() -> None:
    """Under gunicorn's gevent worker (which has patched select), psycopg2 waits on the
    gevent loop; under the threaded worker it blocks as usual, its thread alone."""
    from gevent import monkey
    from psycopg2 import extensions, extras

    if monkey.is_module_patched("select"):
        extensions.set_wait_callback(extras.wait_select)


def create_app() -> Any:
    import psycopg2
    from celery import Celery
    from flask import Flask, jsonify, request

    _green_psycopg2()
    dsn = os.environ["DATABASE_URL"].replace("postgresql+psycopg2://", "postgresql://")
    idle: LifoQueue[Any] = LifoQueue()

    def connection() -> Any:
        if idle.empty():
            conn = psycopg2.connect(dsn)
            conn.autocommit = True
            return conn
        return idle.get_nowait()

    celery = Celery("bench-floor", broker=os.environ["REDIS_URL"])
    app = Flask("bench-floor")

    @app.post("/api/v1/agents")
    def create() -> Any:
        body = request.get_json()
        agent_id = uuid.uuid4()
        conn = connection()
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {TABLE} (id, goal, created_at) VALUES (%s, %s, now())",
                    (str(agent_id), body["goal"]),
                )
        finally:
            idle.put(conn)
        celery.send_task("bench.floor", args=[str(agent_id)], queue=QUEUE)
        return jsonify(id=str(agent_id), status="PENDING"), 202

    return app


def create_table(engine: Any) -> None:
    """The floor's table, in the bench database (dropped with it)."""
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {TABLE} "
                "(id uuid PRIMARY KEY, goal text NOT NULL, created_at timestamptz NOT NULL)"
            )
        )


app = create_app() if os.environ.get("BENCH_CREATE_FLOOR") == "1" else None
