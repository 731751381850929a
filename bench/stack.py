"""The system under test, started from nothing and torn down afterwards.

A fresh PostgreSQL database `jarvis_bench_<random>` (dropped at the end), a Redis of
the benchmark's own (a private `redis-server` on a free port, so the test suite's
`FLUSHDB`s and pub/sub traffic on the shared Redis neither disturb nor are disturbed
by it; `--redis-url` uses an existing one instead), `jarvis-agents db upgrade`, the
`jarvis-agents api` process, and on demand `jarvis-agents worker` processes and bench
model servers, each with its own latency.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from bench.model_server import fetch_calls
from bench.processes import ROOT, Process, StartupError, children, free_port, rss_bytes

PG_ADMIN_URL = os.environ.get(
    "JARVIS_BENCH_PG", "postgresql+psycopg2://root@127.0.0.1:5432/postgres"
)
# Each user may have this many agents PENDING or RUNNING at once (default 20): the
# scenarios start hundreds at a time on purpose.
MAX_ACTIVE_PER_USER = "1000000"
# Each user may hold this many streams open at once (default 100): the fan-out
# scenario opens a thousand as one user.
MAX_STREAMS_PER_USER = "1000000"
# Webhooks on (scenario 5 sends them to a receiver on 127.0.0.1) in every scenario: an
# agent without a webhook_url costs nothing more for it.
WEBHOOK_ENV = {"JARVIS_WEBHOOK_SECRET": "bench-secret", "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1"}


@dataclass(frozen=True)
class Tree:
    """Where the system under test comes from: a checkout, and the Python (with its
    virtualenv) that runs it. The default is this tree."""

    root: Path = ROOT
    python: str = sys.executable


@dataclass
class ModelServer:
    process: Process
    url: str
    latency_s: float
    tool_calls: int

    def calls(self, *, clear: bool = False) -> list[tuple[str, int, float, float]]:
        return fetch_calls(self.url, clear=clear)


class Stack:
    """Database, Redis, migrations and the API; workers and models on demand."""

    def __init__(self, *, log_dir: Path, redis_url: str | None = None, tree: Tree = Tree(),
                 api_env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.tree = tree
        self.api_env = dict(api_env or {})  # the API's settings beyond the stack's own
        self.db_name = f"jarvis_bench_{secrets.token_hex(4)}"
        self.database_url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{self.db_name}"
        self._external_redis = redis_url
        self.redis_url = redis_url or ""
        self.api_url = ""
        self.api: Process | None = None
        self._redis_server: Process | None = None
        self._processes: list[Process] = []
        self._admin: Any = None
        self.engine: Any = None
        self._redis: Any = None

    # --- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._create_database()
            self._start_redis()
            self._migrate()
            self.api = self._start_api()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if self._redis is not None:
            if self._external_redis:
                self._redis.flushdb()
            self._redis.close()
        if self._redis_server is not None:
            self._redis_server.stop()
        if self.engine is not None:
            self.engine.dispose()
        if self._admin is not None:
            from sqlalchemy import text

            with self._admin.connect() as conn:
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": self.db_name},
                )
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db_name}"'))
            self._admin.dispose()
            self._admin = None

    def _create_database(self) -> None:
        from sqlalchemy import create_engine, text

        self._admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.db_name}"'))
        self.engine = create_engine(self.database_url, pool_size=4)

    def _start_redis(self) -> None:
        import redis

        if not self._external_redis:
            binary = shutil.which("redis-server")
            if binary is None:
                raise StartupError("redis-server is not installed; pass --redis-url instead")
            port = free_port()
            data_dir = self.log_dir / "redis"
            data_dir.mkdir(exist_ok=True)
            self._redis_server = Process(
                "redis",
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(data_dir),
                ],
                env=dict(os.environ),
                log_dir=self.log_dir,
            )
            self._redis_server.wait_for("Ready to accept connections", timeout_s=20)
            self.redis_url = f"redis://127.0.0.1:{port}/0"
        self._redis = redis.Redis.from_url(self.redis_url)
        self._redis.flushdb()

    def _migrate(self) -> None:
        result = subprocess.run(
            [self.tree.python, "-m", "jarvis_agents.cli", "db", "upgrade"],
            env=self.env(),
            check=False,
            cwd=self.tree.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise StartupError(f"jarvis-agents db upgrade failed: {result.stderr.strip()}")

    def _start_api(self) -> Process:
        port = free_port()
        process = self._start(
            "api",
            [self.tree.python, "-m", "jarvis_agents.cli", "api", "--port", str(port)],
            env=self.env(**self.api_env),
        )
        process.wait_for("API listening on", timeout_s=60)
        self.api_url = f"http://127.0.0.1:{port}"
        return process

    def restart_api(self) -> None:
        """A fresh API process (on a new port), e.g. to measure memory from a clean start."""
        if self.api is not None:
            self.stop(self.api)
        self.api = self._start_api()

    def _start(self, name: str, args: list[str], *, env: dict[str, str],
               cwd: Path | None = None) -> Process:
        """A process of the system under test (run from its tree), or with `cwd` ROOT one
        of the harness's own (a model server, a receiver, a floor: always this tree's)."""
        process = Process(name, args, env=env, log_dir=self.log_dir, cwd=cwd or self.tree.root)
        self._processes.append(process)
        return process

    def stop(self, process: Process) -> None:
        process.stop()
        if process in self._processes:
            self._processes.remove(process)

    # --- what the scenarios use ------------------------------------------------------

    def env(self, **overrides: str) -> dict[str, str]:
        """The environment of our processes: the stack's URLs and nothing inherited."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JARVIS_", "DATABASE_URL", "REDIS_URL", "OLLAMA_"))
        }
        env.update(
            PYTHONUNBUFFERED="1",
            JARVIS_LOG_JSON="0",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            JARVIS_MAX_ACTIVE_PER_USER=MAX_ACTIVE_PER_USER,
            JARVIS_MAX_STREAMS_PER_USER=MAX_STREAMS_PER_USER,
            JARVIS_MODEL="llama3.2",
            JARVIS_DATA_DIR=str(self.log_dir / "data"),
            **WEBHOOK_ENV,
        )
        env.update(overrides)
        return env

    def start_model(self, *, latency_s: float, tool_calls: int) -> ModelServer:
        port = free_port()
        process = self._start(
            f"model-{port}",
            [
                sys.executable,
                "-m",
                "bench.model_server",
                "--port",
                str(port),
                "--latency",
                str(latency_s),
                "--tool-calls",
                str(tool_calls),
            ],
            env=self.env(), cwd=ROOT,
        )
        process.wait_for("bench model listening", timeout_s=30)
        return ModelServer(process, f"http://127.0.0.1:{port}", latency_s, tool_calls)

    def start_webhook_receiver(self) -> tuple[Process, str]:
        """`bench.webhook_receiver` on a free port: its process and URL."""
        port = free_port()
        process = self._start(
            f"webhook-receiver-{port}",
            [sys.executable, "-m", "bench.webhook_receiver", "--port", str(port)],
            env=self.env(), cwd=ROOT,
        )
        process.wait_for("bench webhook receiver listening", timeout_s=30)
        return process, f"http://127.0.0.1:{port}"

    def start_create_floor(self, *, threaded: bool = False) -> tuple[Process, str]:
        """The create floor (`bench.create_floor`) on its own gunicorn, one worker: gevent,
        as our API is served, or `threaded` (gthread, one thread per client and more); its
        process and URL."""
        from bench.create_floor import create_table

        create_table(self.engine)
        port = free_port()
        worker = (
            ["--worker-class", "gthread", "--threads", "16"] if threaded
            else ["--worker-class", "gevent", "--worker-connections", "1000"]
        )
        process = self._start(
            "create-floor-threaded" if threaded else "create-floor",
            [
                sys.executable, "-m", "gunicorn", *worker, "--workers", "1",
                "--bind", f"127.0.0.1:{port}", "bench.create_floor:app",
            ],
            env=self.env(BENCH_CREATE_FLOOR="1"), cwd=ROOT,
        )
        process.wait_for("Booting worker", timeout_s=60)
        return process, f"http://127.0.0.1:{port}"

    def start_worker(
        self, model: ModelServer, *, concurrency: int | None = None, name: str = "worker"
    ) -> Process:
        return self.start_workers(model, concurrency=concurrency, names=[name])[0]

    def start_workers(
        self, model: ModelServer, *, names: list[str], concurrency: int | None = None,
        extra_args: Sequence[str] = (), extra_env: Mapping[str, str] | None = None,
    ) -> list[Process]:
        """`jarvis-agents worker` processes, started together, returned once all are ready."""
        args = [self.tree.python, "-m", "jarvis_agents.cli", "worker", *extra_args]
        if concurrency is not None:
            args += ["--concurrency", str(concurrency)]
        env = self.env(OLLAMA_HOST=model.url, **(extra_env or {}))
        processes = [self._start(name, args, env=env) for name in names]
        for process in processes:
            process.wait_for("ready.", timeout_s=90)
        return processes

    def system_cpu_s(self, processes: Sequence[Process]) -> float:
        """CPU seconds so far of the system under test (the API, PostgreSQL, Redis) and of
        `processes` (workers and stand-ins; not the clients)."""
        assert self.api is not None
        return (sum(p.cpu_s() for p in [self.api, *processes])
                + sum(self.service_cpu_s().values()))

    def create_user(self, name: str) -> tuple[uuid.UUID, str]:
        """A user straight in the database (as `jarvis-agents users create` does)."""
        from jarvis_agents.store import repository_for

        user, api_key = repository_for(self.engine).users.create(name)
        return user.id, api_key

    def api_worker_pid(self) -> int:
        """The gunicorn worker under `jarvis-agents api`: the process serving requests."""
        assert self.api is not None
        workers = children(self.api.pid)
        if len(workers) != 1:
            raise RuntimeError(f"expected one API worker process, found {workers}")
        return workers[0]

    def api_rss(self) -> int:
        return rss_bytes(self.api_worker_pid())

    def service_cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by PostgreSQL (all its processes: backends, the WAL
        writer, the checkpointer; other databases' too, so nothing else should run on
        it meanwhile) and by the private Redis."""
        from sqlalchemy import text

        from bench.processes import server_cpu_seconds

        with self.engine.connect() as conn:
            backend = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        found = {"postgres": server_cpu_seconds(backend)}
        if self._redis_server is not None:
            found["redis"] = self._redis_server.cpu_s()
        return found

    @property
    def redis(self) -> Any:
        return self._redis

    def server_versions(self) -> dict[str, str]:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            postgres = conn.execute(text("SHOW server_version")).scalar_one()
        return {
            "postgres server": str(postgres),
            "redis server": str(self._redis.info("server")["redis_version"]),
        }
