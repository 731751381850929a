"""Shared fixtures: real PostgreSQL, Redis, worker processes and model servers.

A missing service skips its tests locally and fails them in CI (CI=true).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
PG_ADMIN_URL = os.environ.get("JARVIS_TEST_PG", "postgresql+psycopg2://root@127.0.0.1:5432/postgres")
REDIS_BASE = os.environ.get("JARVIS_TEST_REDIS", "redis://127.0.0.1:6379")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked `long` first, each in its order: a session that takes one of them
    last would run on alone for minutes after the others are done (with `make test`'s
    `--no-loadscope-reorder`, xdist hands the files out in this order)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def missing(service: str, why: str) -> None:
    """Skip locally, fail in CI: a green CI must have run every test."""
    message = f"{service} is not available: {why}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- PostgreSQL ----------------------------------------------------------------------


@contextmanager
def new_pg_database(*, migrated: bool = True) -> Iterator[str]:
    """A fresh PostgreSQL database, migrated unless told not to, dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"jarvis_test_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        missing("PostgreSQL", str(exc.orig).strip().splitlines()[0])
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    from jarvis_agents.store.database import upgrade

    try:
        if migrated:
            upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = :name AND pid <> pg_backend_pid()"), {"name": name})
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    with new_pg_database() as url:
        yield url


def _truncate(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE agent_steps, agents, users CASCADE"))
    engine.dispose()


@pytest.fixture
def pg_url(pg_server_url: str) -> str:
    """The session's PostgreSQL database, emptied for this test."""
    _truncate(pg_server_url)
    return pg_server_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    from jarvis_agents.store.database import upgrade

    url = f"sqlite:///{tmp_path / 'jarvis.db'}"
    upgrade(url)
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test that takes this runs twice: on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def repository(database_url: str) -> Iterator[Any]:
    from jarvis_agents.store import repository_for
    from jarvis_agents.store.database import make_engine

    repo = repository_for(make_engine(database_url))
    yield repo
    repo.engine.dispose()


# --- Redis ---------------------------------------------------------------------------

def _redis_block() -> range:
    """The databases of the shared Redis this session may use: 1-15, or under
    pytest-xdist (`make test` runs 4 sessions at once) its share of them, one block
    per xdist worker, so that no two sessions ever flush or share a database."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    block = range(1 + index * 15 // workers, 1 + (index + 1) * 15 // workers)  # all 15 shared out
    if len(block) < 3:
        raise RuntimeError(f"{workers} xdist workers are too many for Redis's 16 databases")
    return block


# The block's last database belongs to the session's shared API and live stack, whose
# worker lives for the whole session: were it in the cycle, a test reusing it would
# share a queue with that worker, which would take the test's tasks.
REDIS_BLOCK = _redis_block()
SHARED_REDIS_DB = REDIS_BLOCK[-1]
_redis_dbs = itertools.cycle(REDIS_BLOCK[:-1])
_held_redis_dbs: set[int] = set()


@pytest.fixture(scope="session")
def redis_dbs_lock() -> Iterator[None]:
    """The session's block of the shared Redis's databases belongs to it alone.

    Two sessions cycling through the same databases would flush each other's
    queues and steal each other's tasks; a second session waits here instead. Each
    database has a lock of its own, taken in ascending order, so that blocks that
    overlap (a plain `pytest` beside `make test`'s sessions) exclude each other.
    """
    import fcntl
    import tempfile

    host_port = REDIS_BASE.rsplit("/", 1)[-1].replace(":", "-")
    with contextlib.ExitStack() as held:
        for db in REDIS_BLOCK:
            path = Path(tempfile.gettempdir()) / f"jarvis-agents-tests-redis-{host_port}-{db}.lock"
            handle = held.enter_context(path.open("w"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                sys.stderr.write(f"\nwaiting for another test session to release {path} ...\n")
                fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _next_redis_db() -> int:
    """The cycle's next database that no module's stack holds (`held_redis_db`)."""
    for _ in range(len(REDIS_BLOCK)):
        db = next(_redis_dbs)
        if db not in _held_redis_dbs:
            return db
    raise RuntimeError("every Redis test database is held by a module's stack")


@contextmanager
def emptied_redis(db: int) -> Iterator[str]:
    """Redis database `db`, emptied before and after (a missing Redis skips, or in CI fails)."""
    import redis

    url = f"{REDIS_BASE}/{db}"
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        client.close()
        missing("Redis", str(exc))
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


@contextmanager
def held_redis_db() -> Iterator[str]:
    """An emptied Redis database kept out of the cycle while held: a module's worker
    lives on it, and a test drawing it from the cycle would share that worker's queue."""
    db = _next_redis_db()
    _held_redis_dbs.add(db)
    try:
        with emptied_redis(db) as url:
            yield url
    finally:
        _held_redis_dbs.discard(db)


@contextmanager
def private_redis(directory: Path) -> Iterator[str]:
    """A redis-server of the caller's own, for a test that reads the server's figures
    (`INFO commandstats`): on the shared server they count every session's commands,
    and `make test` runs several sessions at once."""
    from tests.faults.own_servers import OwnRedis

    server = OwnRedis(directory)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_dbs_lock: None) -> Iterator[str]:
    """An emptied Redis database of its own (queues do not leak between tests)."""
    with emptied_redis(_next_redis_db()) as url:
        yield url


# --- the model -------------------------------------------------------------------------


@pytest.fixture
def fake_ollama() -> Iterator[Any]:
    from tests.support.fake_ollama import FakeOllama

    with FakeOllama() as server:
        yield server


# --- processes ------------------------------------------------------------------------


def cli_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JARVIS_", "DATABASE_URL", "REDIS_URL", "OLLAMA_"))}
    # The MCP server's port picked free, not the API's + 1 (its default), which may be any
    # client's ephemeral port at the moment `up` binds it.
    env.update(PYTHONUNBUFFERED="1", JARVIS_LOG_JSON="0", JARVIS_MCP_PORT=str(free_port()))
    env.update(overrides)
    return env


def _descendants(pid: int) -> list[int]:
    """The pids below `pid` in the process tree (Linux: read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


class Process:
    """A child process of the test, with its output in a file for diagnostics."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path, *,
                 cwd: Path = ROOT) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"process exited ({self.proc.returncode}):\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not seen within {timeout_s} s:\n{self.output()[-3000:]}")

    def signal(self, sig: int) -> None:
        """Send `sig` as a terminal or a service manager would: to the process group.
        SIGKILL stands for the machine dying, so it reaches every descendant too (the
        worker's Celery process has a process group of its own: workers.main)."""
        import signal

        if self.proc.poll() is not None:
            return
        victims = _descendants(self.proc.pid) if sig == signal.SIGKILL else []
        os.killpg(self.proc.pid, sig)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self, timeout_s: float = 15) -> None:
        import signal

        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def stop_all(processes: list[Process]) -> None:
    """SIGTERM them all at once, then wait for each: shutdowns overlap."""
    import signal

    for process in processes:
        process.signal(signal.SIGTERM)
    for process in processes:
        process.stop()


def worker_process(env: dict[str, str], log_path: Path, *, concurrency: int = 100,
                   models: str | None = None) -> Process:
    """`jarvis-agents worker` started as a child of the test (not waited for)."""
    args = [sys.executable, "-m", "jarvis_agents.cli", "worker", "--concurrency", str(concurrency)]
    if models is not None:
        args += ["--models", models]
    return Process(args, cli_env(**env), log_path)


def kill_all(processes: list[Process]) -> None:
    """SIGKILL them and all their children: for processes whose test is over, whose
    graceful stop (~1.5 s for a worker) nobody would look at."""
    import signal

    for process in processes:
        process.signal(signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.proc.wait(5)
        process.stop()


@pytest.fixture
def started_processes() -> Iterator[list[Process]]:
    """The workers and APIs a test started (`start_worker`, `start_api`), killed at its
    end: its assertions are made by then, its database and Redis database are emptied
    for the next test (`pg_url`, `redis_url`), and the tests of a graceful stop stop
    their processes themselves (test_worker_death, test_up)."""
    started: list[Process] = []
    yield started
    kill_all(started)


@pytest.fixture
def start_worker(tmp_path: Path, started_processes: list[Process]) -> Any:
    """Start `jarvis-agents worker` processes: start_worker(env) → Process (ready)."""
    counter = itertools.count()

    def start(env: dict[str, str], *, concurrency: int = 100, wait: bool = True,
              models: str | None = None) -> Process:
        process = worker_process(env, tmp_path / f"worker-{next(counter)}.log",
                                 concurrency=concurrency, models=models)
        started_processes.append(process)
        if wait:
            process.wait_for("ready.", timeout_s=60)
        return process

    return start
